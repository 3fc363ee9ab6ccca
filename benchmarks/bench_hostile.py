"""Benchmark memory bounds against hostile input (issue 10).

    python benchmarks/bench_hostile.py ranks [N]       # diagnose a log with N distinct rank prefixes
    python benchmarks/bench_hostile.py shapes [N]      # N lines of random words: no shape repeats
    python benchmarks/bench_hostile.py probe [SECONDS] # the probe under empty steps, nothing else
    python benchmarks/bench_hostile.py jobs [N]        # diagnose N small files, --jobs N and serial

`ranks` writes a log of N lines (default 10^6, about 40 MB), each a step-time line with its own
`[rankN]:` prefix, runs `diagnose` on it in this process and prints the time, the peak RSS and
what the report says was capped. Before the rank cap (issue 10) 10^6 ranks took 5.4 GB and 92 s.

`shapes` writes N lines (default 300,000) of random words, a third of them words rules look for
(so most lines are candidates) and hardly two of the same shape, and scans them twice in this
process: as diagnose does, and with line shapes turned off (every candidate line by line), for
the ratio of the two: line shapes must step aside when they do not repeat (issue 34).

`probe` runs `with probe.step(): pass` as fast as it can for SECONDS (default 14) and prints the
steps per second and the RSS every 2 seconds: it must stay flat (before, the writer's drain list
grew from 106 to 617 MB in 14 s).

`jobs` writes N one-line logs (default 3000) and runs `trainwreck diagnose --jobs N`, `--jobs 64`
and `--jobs 1` on them as subprocesses (each stopped after 120 s), sampling every 0.2 s how many
processes the command has and their summed proportional set size (PSS). Before the worker cap (issue 34) `--jobs 3000`
on 3000 files started 1,558 processes and used 5.3 GB in 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 1e6


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # KiB on Linux


def bench_ranks(count: int) -> None:
    from trainwreck.compile.packs import resolve
    from trainwreck.diagnose import diagnose

    rules = resolve(ROOT, None, use_installed=False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "many-ranks.log"
        with open(path, "w") as handle:
            for rank in range(count):
                handle.write(f"[rank{rank}]: step 1 | step_time 100 ms\n")
        size = path.stat().st_size / 1e6
        base = peak_mb()
        started = time.perf_counter()
        report = diagnose([str(path)], rule_set=rules)
        elapsed = time.perf_counter() - started
    print(f"{count:,} distinct ranks, {size:.1f} MB: {elapsed:.1f} s")
    print(f"peak RSS {peak_mb():.0f} MB (rules loaded: {base:.0f} MB)")
    for item in report.skipped:
        print(f"skipped: {item.reason}")
    print(f"findings: {report.entries or 'none'}")


def write_random_words(path: Path, count: int) -> None:
    rng = random.Random(7)
    common = ["step", "time", "loss", "error", "warning", "NCCL", "WARN", "nan", "ms", "rank"]
    common += ["CUDA", "memory", "allocated", "GiB", "iteration", "sec", "signal", "timeout"]
    letters = string.ascii_lowercase
    with open(path, "w") as handle:
        for _ in range(count):
            words = [
                rng.choice(common)
                if rng.random() < 0.35
                else "".join(rng.choice(letters) for _ in range(rng.randint(2, 7)))
                for _ in range(rng.randint(4, 9))
            ]
            # under 80 columns: no line looks wrapped by a terminal (those blocks are joined)
            handle.write(" ".join(words)[:78].rstrip() + "\n")


def bench_shapes(count: int) -> None:
    from trainwreck import engine as eng
    from trainwreck.compile.packs import resolve
    from trainwreck.engine import scanning

    rules = resolve(ROOT, None, use_installed=False).rules
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "random-words.log"
        write_random_words(path, count)
        size = path.stat().st_size / 1e6
        engine = eng.Engine(rules)
        engine.scan([("warm-up", __file__)], jobs=1)  # the prefilter's and patterns' start-up
        timings = {}
        for label in ("as diagnose scans", "line by line only"):
            if label == "line by line only":
                scanning.BLOCK_SET_AFTER = scanning.BLOCK_SET_EARLY = 1 << 60
            engine = eng.Engine(rules)
            started = time.perf_counter()
            scan = engine.scan([(str(path), str(path))], jobs=1)
            timings[label] = time.perf_counter() - started
            print(f"{label}: {timings[label]:.2f} s ({scan.lines:,} lines, {size:.1f} MB)")
    ratio = timings["as diagnose scans"] / timings["line by line only"]
    print(f"shapes / line by line: {ratio:.2f}x; peak RSS {peak_mb():.0f} MB")


def bench_probe(seconds: float) -> None:
    from trainwreck.probe import Probe

    with tempfile.TemporaryDirectory() as folder:
        probe = Probe(folder, rank=0, record_gc=False)
        started = last = time.perf_counter()
        steps = 0
        print(f"{0:5.1f} s: RSS {rss_mb():.0f} MB")
        while (now := time.perf_counter()) - started < seconds:
            for _ in range(10_000):
                with probe.step():
                    pass
            steps += 10_000
            if now - last >= 2:
                last = now
                print(
                    f"{now - started:5.1f} s: RSS {rss_mb():.0f} MB, {steps / (now - started):,.0f} steps/s"
                )
        probe.close()
    print(f"peak RSS {peak_mb():.0f} MB")


def _tree(pid: int) -> list[int]:
    """pid and its descendants (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _tree_pss_mb(pids: list[int]) -> float:
    """Summed proportional set size: pages a forked worker shares with its parent count once
    in all (summed RSS would count them once per worker)."""
    total_kib = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        total_kib += int(line.split()[1])
                        break
        except (OSError, IndexError, ValueError):
            continue
    return total_kib / 1e3


def _run_watched(command: list[str], limit: float) -> tuple[float, int, int, float, int | None]:
    """(wall s, processes seen at once at most, processes seen in all, peak summed PSS MB, rc)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    started = time.perf_counter()
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    most, seen, peak = 0, set(), 0.0
    while child.poll() is None and time.perf_counter() - started < limit:
        pids = _tree(child.pid)
        seen.update(pids)
        most = max(most, len(pids))
        peak = max(peak, _tree_pss_mb(pids))
        time.sleep(0.2)
    if child.poll() is None:
        os.killpg(child.pid, 15)
    child.wait()
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    for line in stderr.splitlines()[:3]:
        print(f"    stderr: {line}")
    return time.perf_counter() - started, most, len(seen), peak, child.returncode


def bench_jobs(count: int) -> None:
    print(f"CPUs usable: {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        for index in range(count):
            (Path(folder) / f"{index}.log").write_text("step 1 | loss 1.0\n")
        for jobs in (count, 64, 1):
            command = [sys.executable, "-m", "trainwreck", "diagnose", "--no-installed"]
            command += ["--jobs", str(jobs), folder]
            wall, most, seen, peak, rc = _run_watched(command, 120.0)
            print(
                f"--jobs {jobs}: {wall:.1f} s, {most} processes at once ({seen} in all), "
                f"peak memory {peak:.0f} MB (summed PSS), exit {rc}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("ranks", "shapes", "probe", "jobs"))
    parser.add_argument("amount", nargs="?", type=float)
    args = parser.parse_args()
    if args.what == "ranks":
        bench_ranks(int(args.amount or 1_000_000))
    elif args.what == "shapes":
        bench_shapes(int(args.amount or 300_000))
    elif args.what == "jobs":
        bench_jobs(int(args.amount or 3000))
    else:
        bench_probe(args.amount or 14.0)


if __name__ == "__main__":
    main()
