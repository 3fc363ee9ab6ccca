"""Where the time of hang forensics goes, per dump (issue 24): reading a dump with the
restricted unpickler, tracing it into arrays, freeing its raw mapping (the old path); reading
it with fastread and tracing its runs (the path report takes); and, for comparison,
one walk over the same bytes with `pickletools.genops`, the least that any reader written in
Python that looks at every opcode must do.

    python benchmarks/bench_forensics_stages.py DIR [--dumps 200]

DIR holds dumps, e.g. those `bench_forensics.py --dir DIR` writes. Prints CPU milliseconds per
dump for each stage, and the opcodes per dump.
"""

from __future__ import annotations

import argparse
import gc
import pickletools
import sys
import time
from pathlib import Path

from trainwreck.forensics.dumps import read_raw
from trainwreck.forensics.traces import Signatures, trace


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--dumps", type=int, default=200)
    args = parser.parse_args()
    files = sorted(p for p in args.dir.iterdir() if p.is_file())[: args.dumps]
    if not files:
        print(f"{args.dir}: no dumps", file=sys.stderr)
        return 1
    gc.disable()  # as report.analyse runs
    signatures = Signatures()
    load = traced = freed = 0.0
    kept = []
    for path in files:
        started = time.process_time()
        raw, header = read_raw(str(path))
        loaded = time.process_time()
        kept.append(trace(raw, header, signatures))
        done = time.process_time()
        del raw
        gone = time.process_time()
        load, traced, freed = load + loaded - started, traced + done - loaded, freed + gone - done
    fast_read = fast_trace = 0.0
    signatures = Signatures()
    taken = 0
    for path in files:
        started = time.process_time()
        raw, header = read_raw(str(path), fast=True)
        loaded = time.process_time()
        taken += not isinstance(raw["entries"], list)
        kept.append(trace(raw, header, signatures))
        del raw
        done = time.process_time()
        fast_read, fast_trace = fast_read + loaded - started, fast_trace + done - loaded
    sample = files[: max(1, min(10, len(files)))]
    started = time.process_time()
    opcodes = sum(sum(1 for _ in pickletools.genops(p.read_bytes())) for p in sample)
    walk = (time.process_time() - started) / len(sample)
    count = len(files)
    print(
        f"{count} dumps, CPU ms per dump: restricted unpickler {load / count * 1e3:.2f}, "
        f"trace {traced / count * 1e3:.2f}, free {freed / count * 1e3:.2f}; "
        f"fastread {fast_read / count * 1e3:.2f}, its trace and free {fast_trace / count * 1e3:.2f} "
        f"({taken} of {count} read fast); "
        f"pickletools.genops walk {walk * 1e3:.1f} ({opcodes // len(sample)} opcodes per dump)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
