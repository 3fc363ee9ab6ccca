"""Benchmark scale-out: the logs of a many-rank job diagnosed serially, with --jobs and on Dask.

    python benchmarks/bench_scaleout.py                   # 1,024 per-rank logs
    python benchmarks/bench_scaleout.py --ranks 4096      # more ranks
    python benchmarks/bench_scaleout.py --steps 4000      # longer logs (progress lines per rank)

It writes N per-rank logs (trainwreck.scaleout.synthetic: one rank's DataLoader worker is killed,
every other rank then reports the NCCL watchdog timeout) into a temporary folder (or --dir),
then diagnoses them three ways: serially (--jobs 1), with one forked process per usable CPU
(--jobs N), and as Dask tasks on a LocalCluster of one single-threaded worker process per usable
CPU (--dask). It prints wall and CPU seconds, MB/s, the peak memory of the largest process
(serial, --jobs) and of each Dask worker, and each speed-up beside the machine's parallel
ceiling (bench_diagnose.parallel_ceiling: how much more CPU-bound Python runs in one process per
CPU than in one; shared or hyper-threaded cores keep it below the CPU count). The serial and
--jobs runs are fresh processes; the Dask run starts its cluster inside this one, and its time
includes starting the cluster and its workers compiling the rules. It exits 1 when the three
disagree on the findings.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).resolve().parent)]

from bench_diagnose import parallel_ceiling  # noqa: E402

from trainwreck import formats  # noqa: E402
from trainwreck.compile.packs import resolve  # noqa: E402
from trainwreck.diagnose import diagnose  # noqa: E402
from trainwreck.engine.parallel import usable_cpus  # noqa: E402
from trainwreck.scaleout.synthetic import write_job  # noqa: E402


def run_cli(args: list[str]) -> tuple[float, float, float, dict]:
    """Wall s, CPU s (with its children), peak RSS MiB of the largest process, and the JSON
    report of one `trainwreck diagnose` in a fresh process."""
    code = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "dt = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'dt': dt, 'cpu': u.ru_utime + u.ru_stime, 'rss': u.ru_maxrss / 1024,"
        " 'out': p.stdout, 'err': p.stderr, 'code': p.returncode}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "trainwreck", "diagnose", *args, "--format", "json"]
    done = subprocess.run(
        [sys.executable, "-c", code, *command], capture_output=True, text=True, env=env, cwd=ROOT
    )
    result = json.loads(done.stdout)
    if result["code"] not in (0, 1):
        raise SystemExit(f"diagnose {' '.join(args)} failed: {result['err'].strip()}")
    return result["dt"], result["cpu"], result["rss"], json.loads(result["out"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=1024, help="per-rank logs (default 1,024)")
    parser.add_argument(
        "--steps", type=int, default=2000, help="progress lines per log (default 2,000)"
    )
    parser.add_argument("--workers", type=int, default=None, help="default: the usable CPUs")
    parser.add_argument("--dir", default=None, help="where to write the logs (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = parser.parse_args()
    workers = args.workers or usable_cpus()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="trainwreck-scaleout-"))
    started = time.perf_counter()
    write_job(folder / "job", args.ranks, steps=args.steps)
    size = sum(p.stat().st_size for p in (folder / "job").iterdir()) / 1e6
    print(
        f"{args.ranks:,} per-rank logs, {size:.1f} MB, written in "
        f"{time.perf_counter() - started:.1f} s; {workers} worker(s); load average "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    ceiling = parallel_ceiling()
    print(f"parallel ceiling: CPU-bound Python runs {ceiling:.2f}x as fast in one process per CPU")
    try:
        # (the first run compiles the checkout's rules into the cache, for all three)
        run_cli([str(folder / "job"), "--jobs", "1", "--no-installed"])
        runs = {}
        for name, extra in (
            ("serial", ["--jobs", "1"]),
            (f"--jobs {workers}", ["--jobs", str(workers)]),
        ):
            runs[name] = run_cli([str(folder / "job"), *extra, "--no-installed"])
        from trainwreck.scaleout.cluster import DaskScanner

        rule_set = resolve(ROOT, None, use_installed=False)
        scanner = DaskScanner(workers=workers)
        before = resource.getrusage(resource.RUSAGE_SELF)
        t = time.perf_counter()
        report = diagnose([str(folder / "job")], ROOT, rule_set=rule_set, scanner=scanner)
        dt = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        runs[f"--dask ({workers} workers)"] = (
            dt,
            cpu,
            after.ru_maxrss / 1024,
            json.loads(formats.render(report, "json")),
        )
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    serial = runs["serial"][0]
    for name, (wall, cpu, rss, _) in runs.items():
        note = (
            ""
            if name == "serial"
            else f" | speed-up {serial / wall:4.2f}x (ceiling {ceiling:.2f}x)"
        )
        cpu_note = " (client only)" if name.startswith("--dask") else ""
        print(
            f"{name:>22}: wall {wall:7.2f} s, cpu {cpu:7.2f} s{cpu_note}, {size / wall:6.1f} MB/s,"
            f" peak RSS {rss:6.0f} MiB{note}"
        )
    peaks = sorted(scanner.peak_rss_mib.values())
    if peaks:
        print(
            f"{'Dask workers':>22}: peak RSS {min(peaks):.0f}-{max(peaks):.0f} MiB per worker"
            f" ({len(peaks)} workers)"
        )
    findings = [
        [f["entry"], f["initiating_rank"], len(f["ranks"])] for f in runs["serial"][3]["findings"]
    ]
    print(f"findings: {findings}")
    same = all(run[3]["findings"] == runs["serial"][3]["findings"] for run in runs.values())
    print("the three agree on the findings" if same else "THE FINDINGS DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
