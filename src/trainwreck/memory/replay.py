"""Replaying a recorded trace through the allocator model.

Each `alloc` is served by the model's `malloc` (the recorded requested size, stream), each
`free_requested` / `free_completed` pair frees the model's block for that address, and each
recorded `oom` is retried as an allocation. The recorded segment events (`segment_alloc`, ...)
are not replayed: they are what the real allocator did, and the fidelity check compares them,
group by group, with what the model did at the same point. A run of segment frees that no
allocation follows is the program's own `torch.cuda.empty_cache()` and is replayed as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainwreck.memory.allocator import Allocator, Block
from trainwreck.memory.settings import AllocatorSettings
from trainwreck.memory.snapshot import SEGMENT_ACTIONS, Frame, SnapshotError, TraceEvent

GROWS = ("segment_alloc", "segment_map")


@dataclass(frozen=True)
class Oom:
    """Where a run could not serve a request."""

    event_index: int
    time_us: int | None
    size: int
    stream: int
    reserved: int
    allocated: int
    largest_free: int
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class Divergence:
    event_index: int
    recorded: tuple[tuple[str, int], ...]
    model: tuple[tuple[str, int], ...]


@dataclass
class Fidelity:
    recorded_segment_events: int = 0
    matched_segment_events: int = 0
    recorded_ooms: int = 0
    reproduced_ooms: int = 0
    first_divergence: Divergence | None = None
    # False when the trace records no segment events at all (skip_actions, or a trace not
    # written by the allocator): there is nothing to check the model against.
    checkable: bool = True

    @property
    def exact(self) -> bool:
        return (
            self.checkable
            and self.first_divergence is None
            and self.reproduced_ooms == self.recorded_ooms
        )


@dataclass
class Run:
    settings: AllocatorSettings
    capacity: int | None
    peak_reserved: int = 0
    peak_allocated: int = 0
    allocated_at_peak: int = 0
    largest_free_at_peak: int = 0
    cuda_mallocs: int = 0
    cuda_frees: int = 0
    retries: int = 0
    ooms: int = 0
    first_oom: Oom | None = None
    recorded_ooms_served: int = 0
    fidelity: Fidelity | None = None
    timeline: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def fragmentation_at_peak(self) -> int:
        return self.peak_reserved - self.allocated_at_peak


def empty_cache_points(events: list[TraceEvent]) -> frozenset[int]:
    """Indices where a run of segment frees starts that no cudaMalloc or OOM follows: malloc's
    fallbacks free segments only right before a segment_alloc/segment_map or an oom. Within
    a run, free_completed entries are part of it (release_cached_blocks synchronises pending
    frees between release_available_cached_blocks' frees and its own)."""
    releases = ("segment_free", "segment_unmap")
    points = set()
    i, n = 0, len(events)
    while i < n:
        if events[i].action in releases:
            start = i
            while i < n and events[i].action in (*releases, "free_completed"):
                i += 1
            following = events[i].action if i < n else None
            if following not in GROWS and following != "oom":
                points.add(start)
        else:
            i += 1
    return frozenset(points)


def fallback_candidates(events: list[TraceEvent]) -> dict[int, int]:
    """Runs of segment frees that a cudaMalloc follows: malloc's fallback, or the program's
    empty_cache() followed by an allocation that needed a new segment. Start index -> index of
    that allocation (or oom); the replay tells them apart (see `replay`)."""
    releases = ("segment_free", "segment_unmap")
    found: dict[int, int] = {}
    i, n = 0, len(events)
    while i < n:
        if events[i].action in releases:
            start = i
            while i < n and events[i].action in (*releases, "free_completed"):
                i += 1
            if i < n and events[i].action in GROWS:
                j = i
                while j < n and events[j].action not in ("alloc", "oom"):
                    j += 1
                if j < n:
                    found[start] = j
        else:
            i += 1
    return found


def synchronised_frees(events: list[TraceEvent]) -> frozenset[int]:
    """Indices of free_completed entries that completed inside an allocation's fallback:
    release_cached_blocks synchronises pending frees (synchronize_and_free_events) after the
    cache lookup failed and before it frees segments or gives up with an OOM.

    Before an oom every completion counts: had it completed before the lookup and fitted, the
    request would have been served, and if it does not fit both readings end alike. Before
    segment frees a completion right after its own free_requested reads as an ordinary free
    (the common case, and the one empty_cache() after a free needs); a record_stream free
    synchronised there is the one case replayed early, and the fidelity check says so."""
    points = set()
    n = len(events)
    for i, event in enumerate(events):
        if event.action != "free_completed":
            continue
        j = i + 1
        # Only completions can sit between a synchronised one and the release: no program
        # code runs inside malloc.
        while j < n and events[j].action == "free_completed":
            j += 1
        if j >= n:
            continue
        following = events[j].action
        if following == "oom":
            points.add(i)
            continue
        previous = events[i - 1] if i else None
        ordinary = (
            previous is not None
            and previous.action == "free_requested"
            and previous.addr == event.addr
        )
        if following in ("segment_free", "segment_unmap") and not ordinary:
            points.add(i)
    return frozenset(points)


def recorded_capacity(events: list[TraceEvent]) -> int | None:
    """Reserved bytes plus the device's free bytes at the first recorded OOM: the memory the
    allocator could have had then (non-PyTorch memory excluded)."""
    reserved = 0
    for event in events:
        action = event.action
        if action in GROWS:
            reserved += event.size
        elif action in ("segment_free", "segment_unmap"):
            reserved -= event.size
        elif action == "oom" and event.device_free is not None:
            return reserved + event.device_free
    return None


def recorded_peak_reserved(events: list[TraceEvent]) -> int:
    reserved = peak = 0
    for event in events:
        if event.action in GROWS:
            reserved += event.size
            peak = max(peak, reserved)
        elif event.action in ("segment_free", "segment_unmap"):
            reserved -= event.size
    return peak


def _unknown(name: str, index: int, event: TraceEvent) -> SnapshotError:
    return SnapshotError(
        f"trace event {index} ({event.action}) names address {event.addr:#x}, which no earlier "
        "alloc in the trace returned: the trace does not start at the first allocation "
        "(recorded late, or max_entries dropped its start), so it cannot be replayed",
        file=name,
    )


def replay(
    events: list[TraceEvent],
    settings: AllocatorSettings,
    capacity: int | None,
    *,
    name: str = "<trace>",
    check: bool = False,
    empty_cache_at: frozenset[int] = frozenset(),
    synchronised: frozenset[int] = frozenset(),
    fallbacks: dict[int, int] | None = None,
    samples: int = 0,
) -> Run:
    """One run of the trace under `settings`; with `check`, compared with the recorded segment
    events (reusing the recorded cudaMalloc addresses until the first divergence, so that
    best-fit ties between equal blocks break as they did)."""
    a = Allocator(settings, capacity)
    run = Run(settings, capacity)
    fidelity = Fidelity() if check else None
    if fidelity is not None and not any(e.action in SEGMENT_ACTIONS for e in events):
        fidelity.checkable = False
    if check:
        a.address_hints = {}
    live: dict[int, Block] = {}
    refused: set[int] = set()  # addresses of allocations the model could not serve
    held: list[Block] = []  # synchronised completions, left to the model's own fallback
    group: list[tuple[str, int]] = []
    mark = 0
    every = max(1, len(events) // samples) if samples else 0
    log = a.log
    for index, event in enumerate(events):
        action = event.action
        if action in SEGMENT_ACTIONS:
            if index in empty_cache_at:
                a.release_cached_blocks()
            elif fallbacks and index in fallbacks:
                # Frees that malloc would not have made for the allocation that follows were
                # the program's empty_cache().
                request = events[fallbacks[index]]
                if not a.frees_first(request.size, request.stream):
                    a.release_cached_blocks()
            if fidelity is not None:
                group.append((action, event.size))
                fidelity.recorded_segment_events += 1
                if action == "segment_alloc" and a.address_hints is not None:
                    a.address_hints.setdefault(event.size, []).append(event.addr)
            continue
        if action == "alloc":
            if event.addr in live:
                raise SnapshotError(
                    f"trace event {index} allocates {event.addr:#x} while it is still live: "
                    "the trace is inconsistent",
                    file=name,
                )
            block = a.malloc(event.size, event.stream)
            if block is None:
                refused.add(event.addr)
                _oom(run, a, index, event)
            else:
                live[event.addr] = block
                if a.reserved > run.peak_reserved or a.allocated > run.peak_allocated:
                    _grew(run, a)
        elif action == "free_requested":
            block = live.get(event.addr)
            if block is None:
                if event.addr not in refused:
                    raise _unknown(name, index, event)
            elif block.allocated:
                a.free_requested(block)
        elif action == "free_completed":
            block = live.pop(event.addr, None)
            if block is None:
                if event.addr not in refused:
                    raise _unknown(name, index, event)
                refused.discard(event.addr)
            else:
                if block.allocated:
                    a.free_requested(block)
                if index in synchronised:
                    held.append(block)
                elif block.pending:  # not already completed by a synchronising release
                    a.free_block(block)
        elif action == "oom":
            if fidelity is not None:
                fidelity.recorded_ooms += 1
            block = a.malloc(event.size, event.stream)
            if block is None:
                _oom(run, a, index, event)
                if fidelity is not None:
                    fidelity.reproduced_ooms += 1
            else:
                # The run gets past the request the recorded run failed; the program's tensor
                # never existed after it, so the block goes back at once.
                run.recorded_ooms_served += 1
                _grew(run, a)
                a.free_requested(block)
                a.free_block(block)
        if held and action in ("alloc", "oom"):
            for block in held:  # the model did not need the synchronisation: complete now
                if block.pending:
                    a.free_block(block)
            held = []
        if fidelity is not None and fidelity.checkable and (group or len(log) > mark):
            ours = sorted((entry[0], entry[2]) for entry in log[mark:])
            if sorted(group) == ours:
                fidelity.matched_segment_events += len(group)
            elif fidelity.first_divergence is None:
                fidelity.first_divergence = Divergence(index, tuple(group), tuple(ours))
                a.address_hints = None  # states differ from here: stop reusing addresses
            group = []
            mark = len(log)
        if every and index % every == 0:
            run.timeline.append((index, a.reserved, a.allocated))
    if fidelity is not None and fidelity.checkable and group and not fidelity.first_divergence:
        # Trailing segment events with no allocation after them (an empty_cache at the end).
        ours = sorted((entry[0], entry[2]) for entry in log[mark:])
        if sorted(group) == ours:
            fidelity.matched_segment_events += len(group)
        else:
            fidelity.first_divergence = Divergence(len(events) - 1, tuple(group), tuple(ours))
    run.cuda_mallocs = a.device_allocs
    run.cuda_frees = a.device_frees
    run.retries = a.retries
    run.fidelity = fidelity
    return run


def _grew(run: Run, a: Allocator) -> None:
    if a.allocated > run.peak_allocated:
        run.peak_allocated = a.allocated
    if a.reserved > run.peak_reserved:
        run.peak_reserved = a.reserved
        run.allocated_at_peak = a.allocated
        run.largest_free_at_peak = a.largest_free()


def _oom(run: Run, a: Allocator, index: int, event: TraceEvent) -> None:
    run.ooms += 1
    if run.first_oom is None:
        run.first_oom = Oom(
            index,
            event.time_us,
            event.size,
            event.stream,
            a.reserved,
            a.allocated,
            a.largest_free(),
            event.frames(),
        )
