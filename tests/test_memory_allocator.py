"""The allocator model's rules, each case computed by hand from CUDACachingAllocator.cpp."""

from __future__ import annotations

import pytest

from trainwreck.errors import UsageError
from trainwreck.memory.allocator import (
    Allocator,
    allocation_size,
    round_size,
    roundup_power2_next_division,
)
from trainwreck.memory.settings import AllocatorSettings, parse_alloc_conf

MIB = 1 << 20
DEFAULTS = AllocatorSettings()


def segment_log(a: Allocator) -> list[tuple[str, int]]:
    return [(action, size // MIB) for action, _, size, _ in a.log]


def test_sizes_round_to_512_bytes():
    assert round_size(1, DEFAULTS) == 512
    assert round_size(512, DEFAULTS) == 512
    assert round_size(513, DEFAULTS) == 1024


def test_power2_divisions_round_up_to_the_next_division():
    # Between 1024 and 2048 four divisions are 1024, 1280, 1536, 1792 (the source's example).
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(2048, 4) == 2048  # a power of two stays
    four = parse_alloc_conf("roundup_power2_divisions:4")
    # 1200 B is not above 512 * 4, so it rounds to 512 B steps: 1536.
    assert round_size(1200, four) == 1536
    # 5 MiB + 1: floor 4 MiB, step 1 MiB, so 6 MiB.
    assert round_size(5 * MIB + 1, four) == 6 * MIB


def test_power2_division_list_fills_like_the_parser():
    # 64 MiB is interval 6: the first entry also fills 0-5; 256 MiB is 8; '>' fills from the
    # last interval named (8) to the end, overwriting it; interval 7 keeps 0.
    s = parse_alloc_conf("roundup_power2_divisions:[64:8,256:4,>:1]")
    assert s.roundup_power2_divisions == (8,) * 7 + (0,) + (1,) * 8


def test_segment_sizes():
    assert allocation_size(MIB) == 2 * MIB  # small pool: 2 MiB segments
    assert allocation_size(MIB + 512) == 20 * MIB  # under 10 MiB: 20 MiB segments
    assert allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB  # from 10 MiB: rounded up to 2 MiB
    assert allocation_size(11 * MIB + 512) == 12 * MIB


def test_small_requests_share_a_segment_per_stream():
    a = Allocator(DEFAULTS)
    a.malloc(1000, stream=0)
    a.malloc(1000, stream=0)  # split from the first 2 MiB segment's remainder
    a.malloc(1000, stream=1)  # another stream's pool: a segment of its own
    assert segment_log(a) == [("segment_alloc", 2), ("segment_alloc", 2)]
    assert a.allocated == 3 * 1024


def test_large_blocks_split_only_above_one_mib_left():
    a = Allocator(DEFAULTS)
    block = a.malloc(19 * MIB, 0)  # a 20 MiB segment; 1 MiB left is not > 1 MiB: no split
    assert block is not None and block.size == 20 * MIB
    a.malloc(3 * MIB, 0)  # nothing free: a new 20 MiB segment, split (17 MiB left)
    a.malloc(12 * MIB, 0)  # best fit is the 17 MiB remainder, split again (5 MiB left)
    assert segment_log(a) == [("segment_alloc", 20), ("segment_alloc", 20)]
    assert a.largest_free() == 5 * MIB


def test_freed_neighbours_merge_and_release_cached_blocks_frees_whole_segments():
    a = Allocator(DEFAULTS)
    first = a.malloc(6 * MIB, 0)  # under 10 MiB: a 20 MiB segment, split (14 MiB left)
    second = a.malloc(12 * MIB, 0)  # from the 14 MiB remainder, split (2 MiB left)
    assert first is not None and second is not None
    for block in (first, second):
        a.free_requested(block)
        a.free_block(block)
    assert a.largest_free() == 20 * MIB  # 6 + 12 + the 2 MiB remainder, merged
    a.release_cached_blocks()
    assert segment_log(a) == [("segment_alloc", 20), ("segment_free", 20)]
    assert a.reserved == 0


def test_max_split_size_keeps_oversize_blocks_whole():
    s = parse_alloc_conf("max_split_size_mb:40")
    a = Allocator(s)
    big = a.malloc(60 * MIB, 0)
    assert big is not None
    a.free_requested(big)
    a.free_block(big)
    a.malloc(12 * MIB, 0)  # 12 < 40 and the 60 MiB block is >= 40: not handed out
    assert segment_log(a)[-1] == ("segment_alloc", 12)
    # An oversize request takes it only if it is less than 20 MiB larger: 40 MiB does not
    # (60 >= 40 + 20), 42 MiB does, and it is not split.
    a.malloc(40 * MIB, 0)
    assert segment_log(a)[-1] == ("segment_alloc", 40)
    got = a.malloc(42 * MIB, 0)
    assert got is not None and got.size == 60 * MIB
    assert len(a.log) == 3


def test_failed_cudamalloc_frees_one_oversize_block_first():
    a = Allocator(parse_alloc_conf("max_split_size_mb:40"), capacity=80 * MIB)
    big = a.malloc(60 * MIB, 0)
    assert big is not None
    a.free_requested(big)
    a.free_block(big)
    # 30 MiB: the oversize block is not offered; cudaMalloc of 30 fails (60 + 30 > 80);
    # release_available_cached_blocks frees the 60 MiB block; the second try succeeds.
    assert a.malloc(30 * MIB, 0) is not None
    assert segment_log(a) == [("segment_alloc", 60), ("segment_free", 60), ("segment_alloc", 30)]
    assert a.retries == 0  # release_cached_blocks' retry was not needed


def test_failed_cudamalloc_then_frees_every_unsplit_segment():
    a = Allocator(DEFAULTS, capacity=50 * MIB)
    cached = a.malloc(30 * MIB, 0)
    assert cached is not None
    a.free_requested(cached)
    a.free_block(cached)
    # 40 MiB: no free block fits; 30 + 40 > 50 fails; max_split_size is unset, so straight to
    # release_cached_blocks, then the retry succeeds.
    assert a.malloc(40 * MIB, 0) is not None
    assert segment_log(a) == [("segment_alloc", 30), ("segment_free", 30), ("segment_alloc", 40)]
    assert a.retries == 1


def test_out_of_memory_when_split_segments_cannot_be_released():
    a = Allocator(DEFAULTS, capacity=50 * MIB)
    a.malloc(30 * MIB, 0)
    assert a.malloc(30 * MIB, 0) is None  # 30 live + 30 > 50, nothing cached
    assert a.reserved == 30 * MIB


def _two_cached_blocks(a: Allocator) -> None:
    first, second = a.malloc(24 * MIB, 0), a.malloc(26 * MIB, 0)
    for block in (first, second):
        assert block is not None
        a.free_requested(block)
        a.free_block(block)


def test_garbage_collection_needs_a_memory_fraction():
    gc = parse_alloc_conf("garbage_collection_threshold:0.4")
    a = Allocator(gc, capacity=100 * MIB)
    _two_cached_blocks(a)
    a.malloc(40 * MIB, 0)  # no fraction: GC is off, cudaMalloc fits (50 + 40 <= 100)
    assert [e for e, _ in segment_log(a)].count("segment_free") == 0

    b = Allocator(gc.with_fraction(1.0), capacity=100 * MIB)
    _two_cached_blocks(b)
    # 50 MiB reserved > 0.4 * 100: both cached blocks are unsplit and of the mean age (1 lookup
    # since they were cached), so both are freed before the cudaMalloc.
    b.malloc(40 * MIB, 0)
    assert segment_log(b) == [
        ("segment_alloc", 24),
        ("segment_alloc", 26),
        ("segment_free", 24),
        ("segment_free", 26),
        ("segment_alloc", 40),
    ]


def test_expandable_segments_map_pages_at_the_lowest_address():
    a = Allocator(parse_alloc_conf("expandable_segments:True"), capacity=100 * MIB)
    first = a.malloc(30 * MIB, 0)  # two 20 MiB pages mapped, 10 MiB left free after it
    second = a.malloc(15 * MIB, 0)  # the 10 MiB plus one more page, right after the first
    assert first is not None and second is not None
    assert second.addr == first.addr + 30 * MIB
    assert segment_log(a) == [("segment_map", 40), ("segment_map", 20)]
    assert a.reserved == 60 * MIB
    for block in (first, second):
        a.free_requested(block)
        a.free_block(block)
    a.release_cached_blocks()  # every page is free: all unmapped, the reservation dropped
    assert segment_log(a)[-1] == ("segment_unmap", 60)
    assert a.reserved == 0


def test_expandable_mapping_fails_at_capacity():
    a = Allocator(parse_alloc_conf("expandable_segments:True"), capacity=50 * MIB)
    assert a.malloc(30 * MIB, 0) is not None  # 40 MiB mapped
    assert a.malloc(25 * MIB, 0) is None  # 10 free + one 20 MiB page = 60 > 50


@pytest.mark.parametrize(
    "text",
    [
        "max_split_size_mb:10",  # the parser requires >= 20
        "garbage_collection_threshold:1.5",
        "expandable_segments:yes",
        "roundup_power2_divisions:3",
        "no_such_option:1",
        "backend:cudaMallocAsync",
        "max_split_size_mb",
        "large_segment_size_mb:40",  # a 2.13 key the model does not follow
    ],
)
def test_bad_settings_are_usage_errors(text):
    with pytest.raises(UsageError) as info:
        parse_alloc_conf(text)
    assert text.split(":")[0] in str(info.value) or "allocator setting" in str(info.value)
    assert "\n" not in str(info.value)


def test_per_process_memory_fraction_in_alloc_conf_turns_garbage_collection_on():
    s = parse_alloc_conf("garbage_collection_threshold:0.4,per_process_memory_fraction:1.0")
    assert s.memory_fraction == 1.0
    a = Allocator(s, capacity=100 * MIB)
    assert a.gc_active and a.allowed == 100 * MIB
    assert parse_alloc_conf("pinned_use_background_threads:True").memory_fraction is None
