"""Benchmark `trainwreck diagnose` on a generated multi-rank log, beside grep -E (and ripgrep).

    python benchmarks/bench_diagnose.py 1000          # a 1000 MB log (default 200)
    python benchmarks/bench_diagnose.py 200 --keep    # keep the generated log

The log is a torchrun-style combined log of 8 ranks (`[defaultN]:` prefixes): step lines with
periodic GC stalls buried among ordinary chatter (data loader, NCCL INFO, warnings, tqdm), one
fragmentation OOM near the end. Prints MB/s and peak RSS of diagnose and the baselines, and
checks that diagnose found the GC straggler and the fragmentation OOM. Aims (issue 4): 1 GB in
under 1 GB of memory and within 3x of grep's time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHATTER = [
    "NCCL INFO Channel {c:02d}/0 : {r} -> {n} [send] via NET/IB/{c}/GDRDMA",
    "dataloader: prefetched batch {i} in {ms:.2f} ms (workers=8, pin_memory=True)",
    "throughput: {tps} tokens/s, mfu {mfu:.1f}%, memory allocated {mem:.2f} GiB",
    "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:617: UserWarning: This DataLoader will create 16 worker processes in total.",
    "grad_norm {g:.4f} | lr {lr:.3e} | tokens seen {i}",
    "Epoch 0:  {p:2d}%|######    | {i}/99999 [12:01<30:00,  2.71it/s, loss={loss:.3f}]",
]


def generate(path: Path, megabytes: int, ranks: int = 8, seed: int = 1) -> dict[str, int]:
    """Write the log; returns counts of what was planted."""
    rng = random.Random(seed)
    target = megabytes * 1_000_000
    written = 0
    step = 0
    stalls = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            step += 1
            stall = step % 37 == 0
            stalls += stall
            chunk: list[str] = []
            for r in range(ranks):
                for _ in range(rng.randint(6, 10)):
                    template = rng.choice(CHATTER)
                    text = template.format(
                        c=rng.randint(0, 31),
                        r=r,
                        n=(r + 1) % ranks,
                        i=step,
                        ms=rng.uniform(1, 9),
                        tps=rng.randint(90000, 99000),
                        mfu=rng.uniform(40, 45),
                        mem=rng.uniform(50, 60),
                        g=rng.uniform(0.5, 1.5),
                        lr=3e-4,
                        p=step % 100,
                        loss=rng.uniform(2, 3),
                    )
                    chunk.append(f"[default{r}]:{text}\n")
                ms = 512.0 * (1 + rng.gauss(0, 0.01)) + (400 if stall else 0)
                chunk.append(
                    f"[default{r}]:step {step} | loss {rng.uniform(2, 3):.4f} | step time {ms:.1f} ms\n"
                )
            data = "".join(chunk)
            out.write(data)
            written += len(data)
        oom = (
            "[default3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
            "capacity of 79.25 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has "
            "78.18 GiB memory in use. Of the allocated memory 60.41 GiB is allocated by PyTorch, and 17.13 GiB is "
            "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
        )
        out.write(oom)
    return {"steps": step, "stalls": stalls}


def to_ere(pattern: str) -> str | None:
    """Best-effort RE2 -> POSIX ERE for the grep baseline (None when it cannot be expressed)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    classes = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_"}
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt in classes:
                out.append(classes[nxt] if in_class else f"[{classes[nxt]}]")
            elif nxt in "DSW":
                if in_class:
                    return None
                out.append(f"[^{classes[nxt.lower()]}]")
            elif in_class:
                out.append(nxt if nxt not in "]^-" else "\\" + nxt)
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
            out.append(ch)
        elif ch == "[":
            in_class = True
            out.append(ch)
            if pattern[i + 1 : i + 2] == "^":
                out.append("^")
                i += 1
        elif pattern.startswith("(?P<", i):
            out.append("(")
            i = pattern.index(">", i) + 1
            continue
        elif pattern.startswith("(?:", i):
            out.append("(")
            i += 3
            continue
        elif pattern.startswith("(?i)", i):
            i += 4
            continue
        elif ch in "*+?}" and pattern[i + 1 : i + 2] == "?":
            out.append(ch)  # lazy quantifier: the same lines match
            i += 2
            continue
        else:
            out.append(ch)
        i += 1
    ere = "".join(out)
    return None if "(?" in ere else ere


def measure(command: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak RSS (MiB) and stdout of one command, run in a fresh child
    process (CPU time matters on a shared machine, where wall time includes waiting)."""
    probe = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(json.loads(sys.argv[1]), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
        "dt = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "sys.stdout.write(json.dumps({'dt': dt, 'cpu': u.ru_utime + u.ru_stime, 'rss': u.ru_maxrss / 1024, 'out': p.stdout.decode(errors='replace')[-20000:]}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(command)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    return result["dt"], result["cpu"], result["rss"], result["out"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "megabytes", nargs="?", type=int, default=200, help="size of the generated log in MB"
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument(
        "--dir", default=None, help="where to write the log (default: a temp folder)"
    )
    args = parser.parse_args()

    folder = Path(args.dir or tempfile.mkdtemp(prefix="trainwreck-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "combined-8ranks.log"
    started = time.perf_counter()
    planted = generate(log, args.megabytes)
    size_mb = log.stat().st_size / 1e6
    print(
        f"generated {log} ({size_mb:.0f} MB, {planted['steps']:,} steps x 8 ranks, {planted['stalls']} GC stalls) in {time.perf_counter() - started:.0f} s"
    )

    # Compile the rules once (warm cache), then time diagnose alone.
    trainwreck = [sys.executable, "-m", "trainwreck"]
    subprocess.run(
        [*trainwreck, "compile", "--no-wheel", "--no-tests", "--root", str(ROOT)],
        check=False,
        capture_output=True,
    )
    bundle = ROOT / "build" / "rules" / "bundle.json"
    rules_arg = ["--rules", str(bundle)] if bundle.is_file() else ["--root", str(ROOT)]
    dt, cpu, rss, out = measure(
        [*trainwreck, "diagnose", str(log), "--format", "json", "--no-installed", *rules_arg]
    )
    report = json.loads(out)
    entries = [f["entry"] for f in report["findings"]]
    print(
        f"{'trainwreck diagnose':20s}: wall {dt:7.2f} s ({size_mb / dt:6.1f} MB/s)  cpu {cpu:7.2f} s ({size_mb / cpu:6.1f} MB/s)"
        f"  peak RSS {rss:7.1f} MiB  findings: {', '.join(entries) or 'none'}"
    )
    ok = "python-gc-straggler" in entries and "cuda-allocator-fragmentation" in entries

    patterns: list[str] = []
    if bundle.is_file():
        data = json.loads(bundle.read_text())
        for rule in data["rules"]:
            for spec in rule["matchers"].values():
                for key in ("regex", "start", "end"):
                    if spec.get(key):
                        patterns.append(spec[key])
                patterns.extend(spec.get("capture", []))
    ere = [p for p in (to_ere(p) for p in patterns) if p]
    pattern_file = folder / "patterns.ere"
    pattern_file.write_text("\n".join(ere) + "\n")
    print(
        f"baselines scan for {len(ere)} of the rules' {len(patterns)} line patterns (converted to ERE)"
    )
    baselines = {"grep -E": ["grep", "-E", "-c", "-f", str(pattern_file), str(log)]}
    if shutil.which("rg"):
        baselines["rg"] = ["rg", "-c", "-f", str(pattern_file), str(log)]
    grep_time = grep_cpu = None
    for name, command in baselines.items():
        bdt, bcpu, brss, bout = measure(command)
        if grep_time is None:
            grep_time, grep_cpu = bdt, bcpu
        print(
            f"{name:20s}: wall {bdt:7.2f} s ({size_mb / bdt:6.1f} MB/s)  cpu {bcpu:7.2f} s ({size_mb / max(bcpu, 1e-9):6.1f} MB/s)"
            f"  peak RSS {brss:7.1f} MiB  ({bout.strip()} matching lines)"
        )
    if grep_time and grep_cpu:
        print(
            f"diagnose / grep -E: wall {dt / grep_time:.2f}x, cpu {cpu / grep_cpu:.2f}x (aim: <= 3x)"
        )
    print(
        f"memory aim (< 1024 MiB): {'met' if rss < 1024 else 'NOT met'}; findings: {'as planted' if ok else 'MISSING'}"
    )
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
