"""Traces for tests, docs and the benchmark: a recorder and hand-made and generated programs.

`TraceRecorder` runs a program of allocations and frees through the model and writes the trace
entries the real allocator's `record_trace` calls would write for it (segment events first,
then the `alloc`; an `oom` with `device_free`). Such a trace is self-consistent by
construction: replaying it under the recording's settings must reproduce it exactly, which
tests the replay's bookkeeping, not the model's faithfulness to a GPU (that needs snapshots
recorded on one, committed under recordings/). The hand-made cases' outcomes under other
settings are computed by hand in tests/test_memory_replay.py.
"""

from __future__ import annotations

import random
from typing import Any

from trainwreck.memory.allocator import Allocator, Block, round_size
from trainwreck.memory.settings import AllocatorSettings, parse_alloc_conf

MIB = 1 << 20


class TraceRecorder:
    def __init__(self, settings: AllocatorSettings, capacity: int | None = None) -> None:
        self.allocator = Allocator(settings, capacity)
        self.settings = settings
        self.capacity = capacity
        self.events: list[dict[str, Any]] = []
        self.blocks: dict[int, Block] = {}
        self.time_us = 0

    def _entry(self, action: str, addr: int, size: int, stream: int, **extra: Any) -> None:
        self.time_us += 1
        entry = {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": stream,
            "time_us": self.time_us,
            "frames": extra.pop("frames", []),
        }
        entry.update(extra)
        self.events.append(entry)

    def _pending(self) -> dict[Block, tuple[int, int, int]]:
        # Addresses as they were when freed: completing a free merges the block with its
        # neighbours, which can move its address.
        return {b: (b.addr, b.requested, b.stream) for b in self.allocator.pending}

    def _flush(self, mark: int, pending_before: dict[Block, tuple[int, int, int]]) -> None:
        a = self.allocator
        # Pending frees the allocator synchronised on its way (synchronize_and_free_events).
        synced = sorted(v for b, v in pending_before.items() if b not in a.pending)
        for addr, requested, stream in synced:
            self.blocks.pop(addr, None)
            self._entry("free_completed", addr, requested, stream)
        for action, addr, size, stream in a.log[mark:]:
            self._entry(action, addr, size, stream)

    def alloc(
        self, size: int, stream: int = 0, frames: list[dict[str, Any]] | None = None
    ) -> int | None:
        a = self.allocator
        mark, pending = len(a.log), self._pending()
        block = a.malloc(size, stream)
        self._flush(mark, pending)
        if block is None:
            free = (self.capacity or 0) - a.reserved
            self._entry(
                "oom",
                0,
                round_size(size, self.settings),
                stream,
                device_free=free,
                frames=frames or [],
            )
            return None
        self.blocks[block.addr] = block
        self._entry("alloc", block.addr, size, stream, frames=frames or [])
        return block.addr

    def free(self, addr: int, deferred: bool = False) -> None:
        """Free a tensor; `deferred` models record_stream: the free completes at `complete`."""
        block = self.blocks[addr]
        self._entry("free_requested", addr, block.requested, block.stream)
        self.allocator.free_requested(block)
        if not deferred:
            self.complete(addr)

    def complete(self, addr: int) -> None:
        block = self.blocks.get(addr)
        if block is None or not block.pending:
            return
        del self.blocks[addr]
        self._entry("free_completed", addr, block.requested, block.stream)
        self.allocator.free_block(block)

    def empty_cache(self) -> None:
        a = self.allocator
        mark, pending = len(a.log), self._pending()
        a.release_cached_blocks()
        self._flush(mark, pending)

    def snapshot(self) -> dict[str, Any]:
        return {
            "segments": [],
            "device_traces": [self.events],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": self.settings.text},
        }


def _frames(name: str) -> list[dict[str, Any]]:
    return [{"filename": "train.py", "line": 42, "name": name}]


def fragmentation_case() -> dict[str, Any]:
    """100 MiB. Four 20 MiB tensors, freed; four 12 MiB tensors each split a 20 MiB segment
    (8 MiB left free in each, no segment releasable); 30 MiB then fails with 48 MiB allocated."""
    rec = TraceRecorder(AllocatorSettings(), 100 * MIB)
    first = [rec.alloc(20 * MIB) for _ in range(4)]
    for addr in first:
        rec.free(addr)  # type: ignore[arg-type]
    for _ in range(4):
        rec.alloc(12 * MIB)
    rec.alloc(30 * MIB, frames=_frames("forward"))
    return rec.snapshot()


def max_split_case() -> dict[str, Any]:
    """100 MiB. A 60 MiB tensor, freed; a 12 MiB tensor splits its segment; 50 MiB then fails
    with 12 MiB allocated and 48 MiB free in the split segment."""
    rec = TraceRecorder(AllocatorSettings(), 100 * MIB)
    big = rec.alloc(60 * MIB)
    rec.free(big)  # type: ignore[arg-type]
    rec.alloc(12 * MIB)
    rec.alloc(50 * MIB, frames=_frames("backward"))
    return rec.snapshot()


def capacity_case() -> dict[str, Any]:
    """100 MiB. 60 MiB and then 50 MiB, both live: 110 MiB cannot fit under any setting."""
    rec = TraceRecorder(AllocatorSettings(), 100 * MIB)
    rec.alloc(60 * MIB)
    rec.alloc(50 * MIB, frames=_frames("forward"))
    return rec.snapshot()


def realistic_program(rec: TraceRecorder, events: int, seed: int = 0) -> None:
    """A transformer-like training loop until about `events` entries: long-lived weights and
    optimizer state, a sequence length drawn per step, activations kept for backward (every
    other layer only, as with activation checkpointing, recomputed in backward), short-lived
    temporaries, and input batches copied on a side stream and freed with record_stream."""
    rng = random.Random(seed)
    hidden, layers, batch = 1024, 12, 4
    for _ in range(layers * 4):
        rec.alloc(hidden * hidden * 2 * rng.choice((1, 3, 4)))  # weights (bf16)
    for _ in range(layers * 8):
        rec.alloc(hidden * hidden * 4)  # optimizer state (fp32)
    prefetched: list[int] = []
    while len(rec.events) < events:
        seq = rng.randrange(128, 2049, 64)
        token_bytes = batch * seq * hidden * 2
        batch_addr = rec.alloc(batch * seq * 8, stream=1)  # copied on the side stream
        if batch_addr is not None:
            rec.free(batch_addr, deferred=True)
            prefetched.append(batch_addr)
        if len(prefetched) > 2:
            rec.complete(prefetched.pop(0))
        saved: list[int] = []
        for layer in range(layers):
            for _ in range(6):  # temporaries: attention scores, MLP intermediates, casts
                tmp = rec.alloc(
                    rng.choice(
                        (
                            token_bytes,
                            token_bytes * 4,
                            seq * seq * batch * 2,
                            rng.randrange(512, 65536),
                        )
                    )
                )
                if tmp is not None:
                    rec.free(tmp)
            if layer % 2 == 0:
                kept = rec.alloc(token_bytes)
                if kept is not None:
                    saved.append(kept)
        for addr in reversed(saved):
            recomputed = [rec.alloc(token_bytes * rng.choice((1, 2, 4))) for _ in range(3)]
            grad = rec.alloc(hidden * hidden * 2)
            for r in recomputed:
                if r is not None:
                    rec.free(r)
            rec.free(addr)
            if grad is not None:
                rec.free(grad)
        for _ in range(layers):
            step = rec.alloc(rng.randrange(4096, 1 << 20))  # optimizer temporaries
            if step is not None:
                rec.free(step)


def realistic_case(events: int = 20000, seed: int = 0, settings: str = "") -> dict[str, Any]:
    rec = TraceRecorder(parse_alloc_conf(settings) if settings else AllocatorSettings())
    realistic_program(rec, events, seed)
    return rec.snapshot()
