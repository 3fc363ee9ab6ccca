"""Benchmark `trainwreck diagnose` beside ripgrep and `grep -E` running the rules' own patterns.

    python benchmarks/bench_diagnose.py              # 300 MB per case, as issue 16 measured
    python benchmarks/bench_diagnose.py --size 50    # 50 MB per case
    python benchmarks/bench_diagnose.py --quick      # 20 MB per case, grep skipped past 60 s
    python benchmarks/bench_diagnose.py --only a,c   # some cases

It writes its logs into a temporary folder (or --dir), then runs, case by case:
(a) step-heavy: a torchrun-style combined log of 8 ranks where every line carries a step time
    (the worst case for a diagnoser: every line is a match), with periodic GC stalls and one
    fragmentation OOM at the end;
(b) sparse: ordinary INFO chatter (data loader, NCCL INFO, throughput, warnings) of 8 ranks with
    one CUDA OOM at the very end;
(c) the same chatter as 8 per-rank files (rank0.log ... rank7.log): diagnose with its automatic
    parallelism and again with --jobs 1, for the speed-up on this machine's cores (printed beside
    the machine's own ceiling: how much faster CPU-bound Python runs in one process per CPU than
    in one, which shared or hyper-threaded cores keep well below the CPU count);
(d) gzip: case (b) compressed, read as .gz (ripgrep -z, gzip -dc | grep -E).

For each it prints wall and CPU seconds, MB/s, peak RSS and the ratio to ripgrep. ripgrep gets
every pattern of the compiled bundle (named groups dropped: ripgrep's syntax is RE2's otherwise),
`grep -E` gets them converted to POSIX ERE; both only count matching lines, while diagnose also
captures values, parses times, builds series and runs the detectors. Peak RSS is the largest
single process (a parallel diagnose's workers each stay below it). The machine's load average is
printed: on a shared machine CPU seconds are the fairer measure, wall seconds what a user waits.
It exits 1 when diagnose misses a planted failure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANKS = 8

CHATTER = [
    "NCCL INFO Channel {c:02d}/0 : {r} -> {n} [send] via NET/IB/{c}/GDRDMA",
    "dataloader: prefetched batch {i} in {ms:.2f} ms (workers=8, pin_memory=True)",
    "throughput: {tps} tokens/s, mfu {mfu:.1f}%, memory allocated {mem:.2f} GiB",
    "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:617: UserWarning: "
    "This DataLoader will create 16 worker processes in total.",
    "grad_norm {g:.4f} | lr {lr:.3e} | tokens seen {i}",
    "Epoch 0:  {p:2d}%|######    | {i}/99999 [12:01<30:00,  2.71it/s, loss={loss:.3f}]",
]

# The current PyTorch wording (FACTS.md, "Log formats seen in real reports"), with most of the
# reserved memory unallocated: the fragmentation case.
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.25 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
    "has 78.18 GiB memory in use. Of the allocated memory 60.41 GiB is allocated by PyTorch, and "
    "17.13 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def stamp(step: int) -> str:
    return f"2024-05-01 {12 + step // 3600 % 12:02d}:{step // 60 % 60:02d}:{step % 60:02d},{step % 1000:03d}"


def write_step_heavy(path: Path, megabytes: float) -> None:
    """Every line a step-time line of one of 8 ranks; every 37th step stalls on all ranks."""
    rng = random.Random(1)
    target = int(megabytes * 1_000_000)
    written = step = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            chunk = []
            for _ in range(1000):
                step += 1
                stall = 400.0 if step % 37 == 0 else 0.0
                when = stamp(step)
                for r in range(RANKS):
                    ms = 512.0 * (1 + rng.gauss(0, 0.01)) + stall
                    chunk.append(
                        f"[default{r}]:[{when}] INFO step {step} | loss {rng.uniform(2, 3):.4f}"
                        f" | step time {ms:.1f} ms\n"
                    )
            data = "".join(chunk)
            out.write(data)
            written += len(data)
        out.write(f"[default3]:{OOM}\n")


def chatter_lines(rng: random.Random, step: int, rank: int) -> list[str]:
    lines = []
    for _ in range(rng.randint(6, 10)):
        template = rng.choice(CHATTER)
        lines.append(
            f"[{stamp(step)}] INFO "
            + template.format(
                c=rng.randint(0, 31),
                r=rank,
                n=(rank + 1) % RANKS,
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
        )
    return lines


def write_sparse(path: Path, megabytes: float) -> None:
    """Ordinary INFO chatter of 8 ranks (combined, prefixed), one OOM on the last line."""
    rng = random.Random(2)
    target = int(megabytes * 1_000_000)
    written = step = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            chunk = []
            for _ in range(200):
                step += 1
                for r in range(RANKS):
                    chunk.extend(f"[default{r}]:{line}\n" for line in chatter_lines(rng, step, r))
            data = "".join(chunk)
            out.write(data)
            written += len(data)
        out.write(f"[default3]:{OOM}\n")


def write_per_rank(folder: Path, megabytes: float) -> list[Path]:
    """The same chatter as one file per rank; rank 3's ends with the OOM."""
    rng = random.Random(3)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"rank{r}.log" for r in range(RANKS)]
    handles = [open(p, "w", encoding="utf-8") for p in paths]  # noqa: SIM115 - closed below
    target = int(megabytes * 1_000_000)
    written = step = 0
    try:
        while written < target:
            chunks: list[list[str]] = [[] for _ in range(RANKS)]
            for _ in range(200):
                step += 1
                for r in range(RANKS):
                    chunks[r].extend(f"{line}\n" for line in chatter_lines(rng, step, r))
            for handle, chunk in zip(handles, chunks, strict=True):
                data = "".join(chunk)
                handle.write(data)
                written += len(data)
        handles[3].write(f"{OOM}\n")
    finally:
        for handle in handles:
            handle.close()
    return paths


# --- the baselines' patterns ---------------------------------------------------------------------


def bundle_patterns(bundle: Path) -> list[str]:
    data = json.loads(bundle.read_text(encoding="utf-8"))
    patterns: list[str] = []
    for rule in data["rules"]:
        for spec in rule["matchers"].values():
            for key in ("regex", "start", "end"):
                if spec.get(key):
                    patterns.append(spec[key])
            patterns.extend(spec.get("capture", []))
    return list(dict.fromkeys(patterns))


def to_rust(pattern: str) -> str:
    """RE2 -> ripgrep (Rust regex): the same syntax; named groups become plain groups, since
    ripgrep joins all patterns into one and a name may not repeat."""
    return re.sub(r"\(\?P<\w+>", "(", pattern)


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


# --- measuring -----------------------------------------------------------------------------------


class Run:
    def __init__(self, wall: float, cpu: float, rss_mib: float, out: str, code: int) -> None:
        self.wall, self.cpu, self.rss, self.out, self.code = wall, cpu, rss_mib, out, code


def measure(command: list[str], timeout: float | None = None) -> Run | None:
    """Wall seconds, CPU seconds (all child processes), peak RSS and stdout of one command, run
    under a fresh Python parent so that its resource usage is its own. None on timeout."""
    # The probe enforces the timeout itself, so that the measured command is killed with it
    # (killing only the probe would leave it running, and loading every later measurement).
    probe = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "try:\n"
        "    p = subprocess.run(json.loads(sys.argv[1]), stdout=subprocess.PIPE,"
        " stderr=subprocess.DEVNULL, timeout=json.loads(sys.argv[2]))\n"
        "except subprocess.TimeoutExpired:\n"
        "    sys.stdout.write('null'); sys.exit(0)\n"
        "dt = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "sys.stdout.write(json.dumps({'dt': dt, 'cpu': u.ru_utime + u.ru_stime, 'rss': u.ru_maxrss / 1024,"
        " 'code': p.returncode, 'out': p.stdout.decode(errors='replace')[-200000:]}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(command), json.dumps(timeout)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    if result is None:
        return None
    return Run(result["dt"], result["cpu"], result["rss"], result["out"], result["code"])


def row(name: str, run: Run | None, megabytes: float, note: str = "") -> str:
    if run is None:
        return f"  {name:22s} timed out {note}"
    return (
        f"  {name:22s} wall {run.wall:7.2f} s {megabytes / run.wall:7.1f} MB/s | cpu {run.cpu:7.2f} s"
        f" {megabytes / max(run.cpu, 1e-9):7.1f} MB/s | peak RSS {run.rss:6.0f} MiB {note}"
    )


def ratio(a: Run | None, b: Run | None) -> str:
    if a is None or b is None:
        return "n/a"
    return f"wall {a.wall / b.wall:5.1f}x, cpu {a.cpu / max(b.cpu, 1e-9):5.1f}x"


def _spin(_: object = None) -> float:
    """A fixed piece of CPU-bound Python (about a second); returns its seconds."""
    started = time.perf_counter()
    total = 0
    for i in range(15_000_000):
        total += i
    return time.perf_counter() - started


def parallel_ceiling() -> float:
    """How much more CPU-bound Python this machine runs in one process per CPU than in one
    process: the most any parallel scan can gain here (shared or hyper-threaded cores give less
    than the CPU count). Best of three of each, alternated."""
    import multiprocessing

    workers = os.cpu_count() or 1
    alone, together = [], []
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_spin, range(workers))  # start the workers
        for _ in range(3):
            alone.append(_spin())
            started = time.perf_counter()
            pool.map(_spin, range(workers))
            together.append(time.perf_counter() - started)
    return workers * min(alone) / min(together)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=float, default=300, help="MB per case (default 300)")
    parser.add_argument("--quick", action="store_true", help="20 MB per case")
    parser.add_argument("--only", default="a,b,c,d", help="cases to run (default a,b,c,d)")
    parser.add_argument("--dir", default=None, help="where to write the logs (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs")
    parser.add_argument(
        "--grep-timeout", type=float, default=None, help="give up on grep -E after this many s"
    )
    args = parser.parse_args()
    size = 20.0 if args.quick else args.size
    grep_timeout = args.grep_timeout or (60.0 if args.quick else 600.0)
    cases = set(args.only.split(","))

    folder = Path(args.dir or tempfile.mkdtemp(prefix="trainwreck-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    trainwreck = [sys.executable, "-m", "trainwreck"]
    subprocess.run(
        [*trainwreck, "compile", "--no-wheel", "--no-tests", "--root", str(ROOT)],
        check=True,
        capture_output=True,
    )
    bundle = ROOT / "build" / "rules" / "bundle.json"
    patterns = bundle_patterns(bundle)
    rust = folder / "patterns.rg"
    rust.write_text("\n".join(to_rust(p) for p in patterns) + "\n", encoding="utf-8")
    ere_list = [e for e in (to_ere(p) for p in patterns) if e]
    ere = folder / "patterns.ere"
    ere.write_text("\n".join(ere_list) + "\n", encoding="utf-8")
    rg = shutil.which("rg")
    ceiling = parallel_ceiling()
    print(
        f"trainwreck diagnose vs ripgrep ({rg or 'not installed'}) and grep -E, {size:g} MB per case;"
        f" {len(patterns)} patterns ({len(ere_list)} as ERE); {os.cpu_count()} CPUs (CPU-bound"
        f" Python runs {ceiling:.2f}x as fast in one process per CPU as in one),"
        f" load average {os.getloadavg()[0]:.1f}"
    )
    diagnose = [
        *trainwreck,
        "diagnose",
        "--format",
        "json",
        "--no-installed",
        "--rules",
        str(bundle),
    ]
    ok = True

    def compare(
        label: str, paths: list[Path], expect: set[str], gz: bool = False, jobs_one: bool = False
    ) -> None:
        nonlocal ok
        megabytes = sum(p.stat().st_size for p in paths) / 1e6
        if gz:
            megabytes = sum(_gunzipped_size(p) for p in paths) / 1e6
        print(f"\n({label}) {megabytes:.0f} MB in {len(paths)} file(s) {'(gzip)' if gz else ''}")
        files = [str(p) for p in paths]
        run = measure([*diagnose, *files])
        found = set()
        if run is not None and run.out.strip():
            found = {f["entry"] for f in json.loads(run.out)["findings"]}
        missing = expect - found
        ok &= not missing
        print(
            row(
                "trainwreck diagnose",
                run,
                megabytes,
                f"found: {', '.join(sorted(found)) or 'none'}",
            )
        )
        if missing:
            print(f"  MISSING planted failures: {', '.join(sorted(missing))}")
        serial = None
        if jobs_one:
            serial = measure([*diagnose, "--jobs", "1", *files])
            print(row("diagnose --jobs 1", serial, megabytes))
        rg_run = None
        if rg:
            rg_run = measure(
                [rg, "--no-config", "-c", *(["-z"] if gz else []), "-f", str(rust), *files]
            )
            print(row("ripgrep", rg_run, megabytes, _count(rg_run)))
        if gz:
            command = ["sh", "-c", f"gzip -dc {' '.join(files)} | grep -E -c -f {ere}"]
        else:
            command = ["grep", "-E", "-c", "-f", str(ere), *files]
        grep_run = measure(command, timeout=grep_timeout)
        print(
            row(
                "grep -E",
                grep_run,
                megabytes,
                _count(grep_run) if grep_run else f"(> {grep_timeout:g} s)",
            )
        )
        print(
            f"  diagnose / ripgrep: {ratio(run, rg_run)};  diagnose / grep -E: {ratio(run, grep_run)}"
        )
        if serial is not None and run is not None:
            print(
                f"  parallel speed-up over --jobs 1: wall {serial.wall / run.wall:.2f}x"
                f" ({megabytes / run.wall:.1f} vs {megabytes / serial.wall:.1f} MB/s); this"
                f" machine's ceiling {ceiling:.2f}x"
            )

    started = time.perf_counter()
    if "a" in cases:
        path = folder / "step-heavy-8ranks.log"
        write_step_heavy(path, size)
        compare(
            "a: step-heavy, 8 ranks, every line a step time",
            [path],
            {"python-gc-straggler", "cuda-allocator-fragmentation"},
        )
        path.unlink() if not args.keep else None
    sparse = folder / "sparse-8ranks.log"
    if cases & {"b", "d"}:
        write_sparse(sparse, size)
    if "b" in cases:
        compare(
            "b: sparse INFO log, one failure at the end", [sparse], {"cuda-allocator-fragmentation"}
        )
    if "c" in cases:
        paths = write_per_rank(folder / "ranks", size)
        compare(
            "c: the same as 8 per-rank files",
            paths,
            {"cuda-allocator-fragmentation"},
            jobs_one=True,
        )
        if not args.keep:
            shutil.rmtree(folder / "ranks", ignore_errors=True)
    if "d" in cases:
        packed = folder / "sparse-8ranks.log.gz"
        subprocess.run(["sh", "-c", f"gzip -1 -c {sparse} > {packed}"], check=True)
        compare("d: the sparse log as gzip", [packed], {"cuda-allocator-fragmentation"}, gz=True)
    print(
        f"\nload average at the end {os.getloadavg()[0]:.1f}; {time.perf_counter() - started:.0f} s in all"
    )
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok else 1


def _count(run: Run | None) -> str:
    if run is None:
        return ""
    total = 0
    for line in run.out.split():
        tail = line.rsplit(":", 1)[-1]
        if tail.isdigit():
            total += int(tail)
    return f"({total:,} matching lines)" if run.code in (0, 1) else f"(exit {run.code})"


def _gunzipped_size(path: Path) -> int:
    size = 0
    with gzip.open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            size += len(chunk)
    return size


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
