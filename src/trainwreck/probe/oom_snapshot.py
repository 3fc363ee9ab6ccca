"""Write a CUDA memory snapshot when the allocator runs out of memory, for
`trainwreck memory replay`.

    import torch
    from trainwreck.probe.oom_snapshot import record_oom_snapshots
    record_oom_snapshots("runs/exp1")   # runs/exp1/oom-snapshot-rank{R}-{N}.pickle

Switches on the allocator's trace (`torch.cuda.memory._record_memory_history`, enabled="all")
and attaches an OOM observer (`torch._C._cuda_attach_out_of_memory_observer`), which the
allocator calls after it records the `oom` entry (CUDACachingAllocator.cpp, `malloc`), so the
snapshot holds the failed request. Like the rest of the probe it never imports torch: the
user's torch must already be imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainwreck.probe.recorder import ProbeWarning, detect_rank

FILE_TEMPLATE = "oom-snapshot-rank{rank}-{count}.pickle"
# Enough for hours of a training loop's allocations; each entry costs a few hundred bytes.
DEFAULT_MAX_ENTRIES = 1_000_000


def record_oom_snapshots(
    directory: str | Path,
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    keep: int = 1,
) -> Callable[..., None]:
    """Start the trace and write up to `keep` snapshots, one per OOM; returns the observer."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise ProbeWarning("record_oom_snapshots: import torch first (the probe never imports it)")
    memory = torch.cuda.memory
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def on_oom(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        if len(written) >= keep:
            return
        rank, _ = detect_rank()
        path = out / FILE_TEMPLATE.format(rank=rank, count=len(written))
        try:
            memory._dump_snapshot(str(path))
        except Exception as exc:  # the OOM itself must still reach the user's code
            print(f"trainwreck probe: could not write {path}: {exc}", file=sys.stderr)
            return
        written.append(path)
        print(
            f"trainwreck probe: wrote {path}; replay it with `trainwreck memory replay {path}`",
            file=sys.stderr,
        )

    memory._record_memory_history(enabled="all", max_entries=max_entries)
    attach: Any = torch._C._cuda_attach_out_of_memory_observer
    attach(on_oom)
    return on_oom
