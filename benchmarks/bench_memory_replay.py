"""Speed of `trainwreck memory replay` on a large trace (a benchmark, not a test).

Generates a realistic trace (trainwreck.memory.traces.realistic_program: weights, optimizer
state, variable sequence lengths, checkpointed activations, temporaries, a side stream with
record_stream frees) of about --events entries, writes it as a snapshot pickle, then, in a
fresh process so that the generator's memory does not count, reads it with the restricted
unpickler and replays it once under one setting, and prints the seconds of each part and the
child's peak RSS. The replay's own state is linear in live blocks; the parsed trace (one
TraceEvent per entry) is linear in events and is most of the RSS.

    python benchmarks/bench_memory_replay.py [--events 1000000] [--settings OPTS] [--check]

Target (issue 25): 1M trace events replayed under one setting in under 10 s on one core.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from pathlib import Path
from trainwreck.memory import replay, snapshot
from trainwreck.memory.settings import parse_alloc_conf
path, settings, check = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
t0, c0 = time.perf_counter(), time.process_time()
snap = snapshot.read(Path(path))
t1, c1 = time.perf_counter(), time.process_time()
events = snap.events
run = replay.replay(events, parse_alloc_conf(settings), None, check=check,
                    empty_cache_at=replay.empty_cache_points(events),
                    synchronised=replay.synchronised_frees(events),
                    fallbacks=replay.fallback_candidates(events))
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"events": len(events), "read_s": t1 - t0, "replay_s": t2 - t1,
                  "read_cpu_s": c1 - c0, "replay_cpu_s": c2 - c1,
                  "peak_reserved": run.peak_reserved, "cuda_mallocs": run.cuda_mallocs,
                  "exact": None if run.fidelity is None else run.fidelity.exact,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--settings", default="", help="PYTORCH_CUDA_ALLOC_CONF syntax")
    parser.add_argument("--check", action="store_true", help="also run the fidelity check")
    args = parser.parse_args()

    from trainwreck.memory import traces

    t0 = time.perf_counter()
    # Recorded under the settings it is replayed with, so that --check has a recording to match.
    data = traces.realistic_case(args.events, seed=0, settings=args.settings)
    generated = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.pickle"
        path.write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
        size = path.stat().st_size
        del data
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(path), args.settings, "1" if args.check else "0"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    result = json.loads(out)
    print(
        f"generated {result['events']} trace events in {generated:.1f} s ({size / 2**20:.0f} MiB pickle)"
    )
    print(
        f"settings: {args.settings or 'defaults'}{' (with the fidelity check)' if args.check else ''}"
    )
    # CPU seconds beside wall seconds: on a shared machine the wall clock includes waiting.
    print(
        f"read (restricted unpickler + typed events): {result['read_s']:.2f} s wall, "
        f"{result['read_cpu_s']:.2f} s CPU"
    )
    print(
        f"replay: {result['replay_s']:.2f} s wall, {result['replay_cpu_s']:.2f} s CPU "
        f"({result['events'] / result['replay_cpu_s'] / 1e6:.2f} M events per CPU second; "
        "target: 1M in < 10 s)"
    )
    print(f"peak RSS of the replaying process: {result['maxrss_kib'] / 1024:.0f} MiB")
    print(
        f"peak reserved {result['peak_reserved'] / 2**30:.2f} GiB, {result['cuda_mallocs']} cudaMallocs"
        + ("" if result["exact"] is None else f", fidelity exact: {result['exact']}")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
