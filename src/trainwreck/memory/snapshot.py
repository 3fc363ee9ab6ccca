"""Reading a `torch.cuda.memory._dump_snapshot` pickle: data only, never code.

The format is documented in torch/cuda/memory.py (`_snapshot`'s docstring, torch 2.13.0 lines
1030-1110): a dict with `segments` (the allocator's state when the snapshot was taken),
`device_traces` (one list of trace entries per device, oldest first: `action`, `addr`, `size`,
`stream`, `time_us`, `frames`, and `device_free` on `oom`) and, in recent versions,
`allocator_settings`. The entry kinds are the allocator's `TraceEntry::Action`s
(c10/cuda/CUDACachingAllocator.h; recorded by `record_trace` calls in
CUDACachingAllocator.cpp: ALLOC in alloc_found_block, FREE_REQUESTED in free, FREE_COMPLETED in
free_block, SEGMENT_ALLOC in alloc_block, SEGMENT_FREE in release_block, SEGMENT_MAP in
map_block, SEGMENT_UNMAP in unmap_block, OOM in malloc, SNAPSHOT in snapshot).

Snapshots come from strangers, so the unpickler refuses every global (DESIGN.md invariant 7):
plain dicts, lists, tuples, strings, numbers, booleans and None are all a snapshot needs.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from trainwreck.errors import ProblemsFound, UsageError

# Actions the replay acts on or checks itself against; `user_defined` entries are annotations
# (`_record_memory_history` / `record_annotation`), skipped.
ACTIONS = frozenset(
    {
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
        "user_defined",
    }
)
SEGMENT_ACTIONS = frozenset({"segment_alloc", "segment_free", "segment_map", "segment_unmap"})
MAX_SNAPSHOT_BYTES = 4 << 30


class SnapshotError(ProblemsFound):
    """A snapshot that cannot be replayed: one line naming the file (and the event)."""


class _Refused(pickle.UnpicklingError):
    """The pickle names a global or a persistent id: it would run code to load."""


class _DataOnly(pickle.Unpickler):
    """Admits only the pickle opcodes of plain containers and scalars: any class, function or
    persistent id (the ways a pickle runs code) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("refused persistent id")


@dataclass(frozen=True, slots=True)
class Frame:
    filename: str
    line: int
    name: str


class TraceEvent(NamedTuple):
    """One trace entry. `frames` stays as read (a list of dicts) until a report needs it. A
    named tuple: a million of them are built per million-entry trace."""

    action: str
    addr: int
    size: int
    stream: int
    time_us: int | None
    device_free: int | None
    raw_frames: Any

    def frames(self) -> tuple[Frame, ...]:
        out = []
        for f in self.raw_frames if isinstance(self.raw_frames, list) else ():
            if isinstance(f, dict):
                line = f.get("line")
                out.append(
                    Frame(
                        str(f.get("filename", "?")),
                        line if isinstance(line, int) else 0,
                        str(f.get("name", "?")),
                    )
                )
        return tuple(out)


@dataclass(frozen=True)
class Snapshot:
    path: str
    device: int
    events: list[TraceEvent]
    allocator_settings: Any
    segment_count: int  # segments at the time the snapshot was taken


def loads(data: bytes, path: str = "<bytes>") -> Any:
    try:
        return _DataOnly(io.BytesIO(data)).load()
    except _Refused as exc:
        raise SnapshotError(f"not a plain-data snapshot pickle ({exc})", file=path) from None
    except RecursionError:
        raise SnapshotError("pickle nests too deeply", file=path) from None
    except Exception as exc:  # truncated or corrupt: EOFError, ValueError, KeyError, ...
        raise SnapshotError(
            f"not a readable snapshot pickle ({type(exc).__name__}: {exc})", file=path
        ) from None


def read(path: Path, device: int | None = None) -> Snapshot:
    """The trace of one device from the snapshot at `path`."""
    name = str(path)
    if not path.is_file():
        raise UsageError(f"{name}: no such snapshot file")
    if path.stat().st_size > MAX_SNAPSHOT_BYTES:
        raise SnapshotError("snapshot larger than 4 GiB; refusing to read it", file=name)
    return parse(loads(path.read_bytes(), name), name, device)


def parse(data: Any, name: str, device: int | None = None) -> Snapshot:
    if not isinstance(data, dict):
        raise SnapshotError(f"expected a snapshot dict, got {type(data).__name__}", file=name)
    traces = data.get("device_traces")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("no device_traces list: not a memory snapshot", file=name)
    used = [i for i, t in enumerate(traces) if t]
    if not used:
        raise SnapshotError(
            "the snapshot has no trace events: record it with "
            "torch.cuda.memory._record_memory_history(enabled='all') (enabled='state' records "
            "no trace)",
            file=name,
        )
    if device is None:
        if len(used) > 1:
            raise SnapshotError(
                f"the snapshot traces devices {used}: choose one with --device", file=name
            )
        device = used[0]
    if not 0 <= device < len(traces) or not traces[device]:
        raise UsageError(f"{name}: device {device} has no trace events (traced: {used})")
    events = []
    append = events.append
    for index, entry in enumerate(traces[device]):
        if type(entry) is not dict:
            raise SnapshotError(f"trace event {index} is not a dict", file=name)
        get = entry.get
        action = get("action")
        if action not in ACTIONS:
            raise SnapshotError(
                f"trace event {index} has unknown action {str(action)[:60]!r}", file=name
            )
        size, addr, stream = get("size"), get("addr", 0), get("stream", 0)
        # `type(...) is int` also refuses booleans.
        if type(size) is not int or size < 0:
            if action != "user_defined":
                raise SnapshotError(f"trace event {index} ({action}) has no size", file=name)
            size = 0
        if type(addr) is not int:
            addr = 0
        if type(stream) is not int:
            stream = 0
        time_us, device_free = get("time_us"), get("device_free")
        append(
            TraceEvent(
                action,
                addr,
                size,
                stream,
                time_us if type(time_us) is int else None,
                device_free if type(device_free) is int else None,
                get("frames"),
            )
        )
    segments = data.get("segments")
    return Snapshot(
        name,
        device,
        events,
        data.get("allocator_settings"),
        len(segments) if isinstance(segments, list) else 0,
    )
