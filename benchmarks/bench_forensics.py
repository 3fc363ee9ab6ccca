"""Benchmark hang forensics at scale (issue 24): 4096 per-rank Flight Recorder dumps of 2000
entries each, analysed in one process on one core. Target: under 30 s and 1 GB.

    python benchmarks/bench_forensics.py [--ranks 4096] [--entries 2000] [--dir DIR]

Writes synthetic pickle dumps shaped like torch 2.13's (every field a real dump has, three
frames per entry, ring buffers that rolled over: sequence ids 1001-3000), one
collective behind the others, then analyses them in a child process (so the writing does not
count towards the peak RSS) and prints the seconds, the peak RSS and the conclusion.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CULPRIT_SHARE = 3  # the culprit is rank ranks // 3
CHILD = """
import json, resource, sys, time
from pathlib import Path
from trainwreck.forensics import report
folder = Path(sys.argv[1])
files = [(str(p), str(p)) for p in sorted(folder.iterdir())]
started = time.perf_counter()
found = report.analyse(files)
conclusion = report.conclude(found)
seconds = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
peak = usage.ru_maxrss * 1024
print(json.dumps({"seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mb": round(peak / 2**20, 1),
                  "dumps": found.traces, "ranks": list(conclusion.ranks) if conclusion else None,
                  "entry": conclusion.entry if conclusion else None}))
"""


def write_dumps(folder: Path, ranks: int, entries: int) -> None:
    frames = [
        {
            "name": "all_reduce",
            "filename": "/venv/site-packages/torch/distributed/distributed_c10d.py",
            "line": 3252,
        },
        {
            "name": "wrapper",
            "filename": "/venv/site-packages/torch/distributed/c10d_logger.py",
            "line": 83,
        },
        {"name": "train_step", "filename": "/job/train.py", "line": 120},
    ]
    first = 1001
    culprit = ranks // CULPRIT_SHARE
    for rank in range(ranks):
        last = first + entries - 1 - (1 if rank == culprit else 0)
        records = [
            {
                "record_id": seq - 1,
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "profiling_name": "nccl:all_reduce",
                "time_created_ns": 1_700_000_000_000_000_000
                + seq * 1_000_000
                + (rank * 7919 + seq) % 1000,
                "duration_ms": 1.5,
                "input_sizes": [[4096, 1024]],
                "input_dtypes": ["Float"],
                "output_sizes": [[4096, 1024]],
                "output_dtypes": ["Float"],
                "state": "completed" if seq < last else "started",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": seq < last,
                "timeout_ms": 600000,
                "is_p2p": False,
                "frames": frames,
                "thread_id": "1",
                "thread_name": "python",
            }
            for seq in range(first, last + 1)
        ]
        dump = {
            "version": "2.10",
            "comm_lib_version": "2.21.5",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}
            },
            "pg_status": {
                "0": {
                    "last_enqueued_collective": last,
                    "last_started_collective": last,
                    "last_completed_collective": last - 1,
                }
            },
            "entries": records,
        }
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument(
        "--dir", type=Path, help="keep the dumps here (default: a temporary folder)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        if (
            len(list(folder.glob("nccl_trace_rank_*"))) != args.ranks
        ):  # --dir keeps them between runs
            write_dumps(folder, args.ranks, args.entries)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(
            f"wrote {args.ranks} dumps x {args.entries} entries ({size / 2**20:.0f} MB) in {time.perf_counter() - started:.1f} s"
        )
        # One core: the analysis is single-threaded; taskset keeps numpy's threads to one CPU too.
        command = [sys.executable, "-c", CHILD, str(folder)]
        if Path("/usr/bin/taskset").exists():
            command = ["taskset", "-c", "0", *command]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={"OPENBLAS_NUM_THREADS": "1", **os.environ},
        )
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        result = json.loads(done.stdout)
    print(
        f"analysed {result['dumps']} dumps in {result['seconds']} s wall, {result['cpu_seconds']} s CPU, "
        f"peak RSS {result['peak_rss_mb']} MB (target 30 s, 1024 MB); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"conclusion: {result['entry']}, initiating ranks {result['ranks']} (expected [{args.ranks // CULPRIT_SHARE}])"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
