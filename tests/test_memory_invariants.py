"""Random programs under memory pressure, recorded through the model and replayed: the replay
must reproduce every recorded segment event and OOM (the fidelity machinery: reused addresses,
synchronised record_stream frees, empty_cache told from fallbacks), and the model's books must
balance (free plus allocated bytes in mapped blocks equal the reserved bytes)."""

from __future__ import annotations

import random

import pytest

from trainwreck.memory.allocator import Allocator
from trainwreck.memory.settings import parse_alloc_conf
from trainwreck.memory.snapshot import parse
from trainwreck.memory.traces import TraceRecorder
from trainwreck.memory.whatif import what_if

MIB = 1 << 20
SETTINGS = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:40",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
]


def mapped_bytes(a: Allocator, live: list) -> int:
    """Every mapped block once, walking each segment from its free, pending and live blocks."""
    seen: set[int] = set()
    total = 0
    starts = list(a.small.by_key.values()) + list(a.large.by_key.values())
    starts += [*a.pending, *live]
    return_blocks = []
    for block in starts:
        head = block
        while head.prev is not None:
            head = head.prev
        return_blocks.append(head)
    for head in return_blocks:
        b = head
        while b is not None:
            if id(b) not in seen:
                seen.add(id(b))
                if b.mapped:
                    total += b.size
            b = b.next
    return total


def random_program(rec: TraceRecorder, rng: random.Random, steps: int) -> None:
    live: list[int] = []
    deferred: list[int] = []
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.5 or not live:
            size = rng.choice(
                [
                    rng.randrange(1, 1 << 20),
                    rng.randrange(1 << 20, 10 << 20),
                    rng.randrange(10 << 20, 60 << 20),
                ]
            )
            addr = rec.alloc(size, stream=rng.choice((0, 0, 0, 1)))
            if addr is not None:
                live.append(addr)
        elif roll < 0.9:
            addr = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.15:
                rec.free(addr, deferred=True)
                deferred.append(addr)
                # A record_stream free whose completion the very next allocation's fallback
                # forces reads like an ordinary free in a trace (replay.synchronised_frees):
                # another tensor is freed in between, as in a real step.
                if live:
                    rec.free(live.pop(rng.randrange(len(live))))
            else:
                rec.free(addr)
        elif roll < 0.97 and deferred:
            rec.complete(deferred.pop(0))
        elif live:
            # empty_cache() directly before a cudaMalloc under pressure cannot be told from
            # that allocation's own fallback in a trace (docs/memory-replay.md, Not modelled):
            # the program frees a tensor after it, as a training step would.
            rec.empty_cache()
            rec.free(live.pop(rng.randrange(len(live))))


# Known: a free the program completes right before an allocation whose garbage collection
# then frees segments reads, in a trace, like one the allocator synchronised inside that
# allocation (replay.synchronised_frees); the replay holds it and collects other blocks.
KNOWN_DIVERGENT = {(3, SETTINGS[4])}


@pytest.mark.parametrize("text", SETTINGS)
@pytest.mark.parametrize("seed", range(4))
def test_recorded_random_programs_replay_exactly(text, seed, request):
    if (seed, text) in KNOWN_DIVERGENT:
        request.applymarker(pytest.mark.xfail(strict=True, reason="known GC divergence"))
    settings = parse_alloc_conf(text)
    rec = TraceRecorder(settings, capacity=160 * MIB)
    random_program(rec, random.Random(seed), 600)
    live = [b for b in rec.blocks.values() if b.allocated]
    assert mapped_bytes(rec.allocator, live) == rec.allocator.reserved
    snap = parse(rec.snapshot(), f"seed{seed}")
    result = what_if(snap, ["expandable_segments:True"], capacity=160 * MIB)
    fidelity = result.recorded.fidelity
    assert fidelity is not None
    assert fidelity.first_divergence is None, fidelity.first_divergence
    assert fidelity.reproduced_ooms == fidelity.recorded_ooms
    assert fidelity.matched_segment_events == fidelity.recorded_segment_events
