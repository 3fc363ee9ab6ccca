"""Per-rank logs of a large job in which one rank fails first and every other rank then times
out in its next collective: what the scale-out test and benchmark scan.

The lines follow the shapes of the repository's own regression logs
(tests/logs/dataloader-worker-killed/rank5-killed-peers-timeout): training progress, then on the
failing rank a DataLoader worker killed by SIGKILL, on the others the NCCL watchdog timeout.
"""

from __future__ import annotations

from pathlib import Path

WATCHDOG = (
    "[rank{rank}]:[E415 07:{minute:02d}:{second:02d}.004118377 ProcessGroupNCCL.cpp:629] "
    "[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9412, "
    "OpType=ALLREDUCE, NumelIn=67108864, NumelOut=67108864, Timeout(ms)=600000) ran for "
    "600012 milliseconds before timing out.\n"
)
KILLED = (
    "[rank{rank}]: Traceback (most recent call last):\n"
    '[rank{rank}]:   File "/usr/local/lib/python3.11/site-packages/torch/utils/data/_utils/'
    'signal_handling.py", line 73, in handler\n'
    "[rank{rank}]:     _error_if_any_worker_fails()\n"
    "[rank{rank}]: RuntimeError: DataLoader worker (pid 91377) is killed by signal: Killed. \n"
)


def failing_rank(ranks: int) -> int:
    """The rank that fails first in a job of `ranks` ranks (not the first nor the last file)."""
    return (ranks * 537) // 1000


def write_job(folder: Path, ranks: int, steps: int = 200) -> list[Path]:
    """Write rank<N>.log for every rank into `folder`; returns their paths in rank order.
    Each log holds `steps` progress lines, then the rank's last words."""
    folder.mkdir(parents=True, exist_ok=True)
    failing = failing_rank(ranks)
    paths = []
    for rank in range(ranks):
        lines = [
            f"step {step} | loss {2.5 - step / (4 * steps) + (rank % 7) / 1000:.4f} | "
            f"data_ms {10 + (rank * 31 + step * 17) % 29 / 10:.1f}\n"
            for step in range(100, 100 + steps)
        ]
        if rank == failing:
            lines.append(KILLED.format(rank=rank))
        else:
            seconds = 52 + rank % 7
            lines.append(WATCHDOG.format(rank=rank, minute=41 + seconds // 60, second=seconds % 60))
        path = folder / f"rank{rank}.log"
        path.write_text("".join(lines))
        paths.append(path)
    return paths
