"""Host memory of a process and its children (DataLoader workers), read from Linux /proc.

RSS counts every resident page a process maps, shared or not, so N forked workers sharing their
parent's pages each show the parent's size; it cannot show copy-on-write. USS (private pages) and
PSS (shared pages divided among the processes mapping them) can: when workers copy pages they
inherited (reference counts written on read), their USS grows while their RSS barely moves.

    from trainwreck.probe import Probe
    from trainwreck.probe.hostmem import loader_memory
    probe.event("host_memory", step=step, **loader_memory())

Never raises: a process that vanished or a /proc that cannot be read yields no numbers for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# smaps_rollup (Linux 4.14+) sums smaps over all mappings: one read per process.
_FIELDS = {"Rss:": "rss", "Pss:": "pss", "Private_Clean:": "private", "Private_Dirty:": "private"}


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    rss_bytes: int
    pss_bytes: int
    uss_bytes: int


def process_memory(pid: int, proc: Path = Path("/proc")) -> ProcessMemory | None:
    """RSS, PSS and USS of one process, or None when it cannot be read."""
    totals = {"rss": 0, "pss": 0, "private": 0}
    try:
        text = (proc / str(pid) / "smaps_rollup").read_text()
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in _FIELDS and parts[1].isdigit():
            totals[_FIELDS[parts[0]]] += int(parts[1]) * 1024  # the kernel reports kB
    return ProcessMemory(pid, totals["rss"], totals["pss"], totals["private"])


def child_pids(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Direct children of a process (all its threads' children), from /proc/PID/task/*/children."""
    children: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return children
    for task in tasks:
        try:
            children.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return sorted(set(children))


def loader_memory(pid: int | None = None, proc: Path = Path("/proc")) -> dict[str, int]:
    """The process's own RSS/PSS/USS and its children's (its DataLoader workers') summed, in
    bytes, as flat fields for a probe event: rss_bytes, pss_bytes, uss_bytes, workers,
    workers_rss_bytes, workers_pss_bytes, workers_uss_bytes. Empty when /proc is unreadable."""
    pid = os.getpid() if pid is None else pid
    own = process_memory(pid, proc)
    if own is None:
        return {}
    workers = [m for m in (process_memory(c, proc) for c in child_pids(pid, proc)) if m is not None]
    return {
        "rss_bytes": own.rss_bytes,
        "pss_bytes": own.pss_bytes,
        "uss_bytes": own.uss_bytes,
        "workers": len(workers),
        "workers_rss_bytes": sum(m.rss_bytes for m in workers),
        "workers_pss_bytes": sum(m.pss_bytes for m in workers),
        "workers_uss_bytes": sum(m.uss_bytes for m in workers),
    }
