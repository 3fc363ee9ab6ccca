"""Expandable segments (`expandable_segments:True`), from CUDACachingAllocator.cpp at 001074d:
`ExpandableSegment` (map, unmap, segmentLeft/Right), `find_expandable_block`, `map_block`,
`try_allocate_expandable_block`, `unmap_block` and `release_blocks`.

One virtual reservation per (pool, stream) of 1 1/8 of the device's memory, mapped in pages of
2 MiB (small pool) or 20 MiB (large pool, kLargeBuffer) as blocks need them; a request is placed
at the lowest address with enough free or unmapped room; freeing memory on OOM unmaps the pages
a free block covers completely. Pages are what counts as reserved.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from trainwreck.memory.allocator import K_LARGE_BUFFER, K_SMALL_BUFFER, Block, Pool

if TYPE_CHECKING:
    from trainwreck.memory.allocator import Allocator


class Segment:
    """One reservation: which of its pages are mapped."""

    __slots__ = ("base", "mapped", "page", "pages")

    def __init__(self, base: int, page: int, pages: int) -> None:
        self.base = base
        self.page = page
        self.pages = pages
        self.mapped = bytearray(pages)

    @property
    def size(self) -> int:
        return self.page * self.pages


def _free(block: Block | None) -> bool:
    """find_expandable_block's `allocatable`: free and with no pending stream use."""
    return block is not None and not block.allocated and not block.pending


class Expandable:
    def __init__(self, allocator: Allocator) -> None:
        self.a = allocator
        self.segments: list[Segment] = []

    def find(self, pool: Pool, stream: int, size: int) -> Block:
        """The lowest-addressed free-or-unmapped run of at least `size` bytes on the stream,
        else a new reservation's single unmapped block."""
        unmapped = pool.unmapped
        i = bisect_left(unmapped, (stream, -1))
        while i < len(unmapped) and unmapped[i][0] == stream:
            candidate = pool.unmapped_by_key[unmapped[i]]
            if _free(candidate.prev):
                candidate = candidate.prev  # type: ignore[assignment]
            room, b = 0, candidate
            while room < size and _free(b):
                room += b.size  # type: ignore[union-attr]
                b = b.next  # type: ignore[union-attr]
            if room >= size:
                return candidate
            i += 1
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        total = self.a.device_total
        address_space = total + total // 8
        segment = Segment(self.a.next_address, page, (address_space + page - 1) // page)
        self.a.next_address += segment.size
        self.segments.append(segment)
        block = Block(segment.base, segment.size, stream, pool.small)
        block.mapped = False
        block.segment = segment
        pool.insert_unmapped(block)
        return block

    def map(self, block: Block, size: int, pool: Pool) -> bool:
        """map_block: map the pages under [addr, addr + size) and merge with free neighbours."""
        a = self.a
        segment: Segment = block.segment  # type: ignore[assignment]
        begin = (block.addr - segment.base) // segment.page
        end = -(-(block.addr + size - segment.base) // segment.page)
        mapped = (end - begin) * segment.page
        if mapped == 0 or (a.capacity is not None and a.reserved + mapped > a.capacity):
            return False  # cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY
        for page in range(begin, end):
            segment.mapped[page] = 1
        pool.remove_unmapped(block)
        block.mapped = True
        if mapped < block.size:
            rest = Block(block.addr + mapped, block.size - mapped, block.stream, block.small)
            rest.mapped = False
            rest.segment = segment
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            pool.insert_unmapped(rest)
            block.size = mapped
        a.merge(block, block.prev, pool)
        a.merge(block, block.next, pool)
        pool.insert(block)
        a.reserved += mapped
        a.device_allocs += 1
        a.log.append(("segment_map", block.addr, mapped, block.stream))
        return True

    def allocate(self, pool: Pool, stream: int, size: int) -> Block | None:
        """try_allocate_expandable_block."""
        candidate = self.find(pool, stream, size)
        if not candidate.mapped and not self.map(candidate, min(candidate.size, size), pool):
            return None
        while candidate.size < size:
            following = candidate.next
            assert following is not None
            if not self.map(following, min(size - candidate.size, following.size), pool):
                return None
            candidate = following  # map merged the previous candidate into it
        pool.remove(candidate)
        return candidate

    def unmap(self, block: Block, pool: Pool) -> None:
        """unmap_block: unmap the pages a free block covers completely."""
        a = self.a
        segment: Segment = block.segment  # type: ignore[assignment]
        begin = -(-(block.addr - segment.base) // segment.page)
        end = (block.addr + block.size - segment.base) // segment.page
        if begin >= end:
            return
        start = segment.base + begin * segment.page
        length = (end - begin) * segment.page
        for page in range(begin, end):
            segment.mapped[page] = 0
        pool.remove(block)
        before = start - block.addr
        if before > 0:
            head = Block(block.addr, before, block.stream, block.small)
            head.segment = segment
            head.prev, head.next = block.prev, block
            if block.prev is not None:
                block.prev.next = head
            block.prev = head
            pool.insert(head)
        after = block.size - (before + length)
        if after > 0:
            tail = Block(start + length, after, block.stream, block.small)
            tail.segment = segment
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            pool.insert(tail)
        block.addr = start
        block.size = length
        block.mapped = False
        a.merge(block, block.prev, pool)
        a.merge(block, block.next, pool)
        pool.insert_unmapped(block)
        a.reserved -= length
        a.device_frees += 1
        a.log.append(("segment_unmap", start, length, block.stream))

    def release(self, pool: Pool, blocks: list[Block]) -> None:
        """release_blocks' expandable part: unmap, and drop a reservation left wholly unmapped."""
        for block in blocks:
            self.unmap(block, pool)
            if not block.mapped and block.prev is None and block.next is None:
                pool.remove_unmapped(block)
                self.segments = [s for s in self.segments if s is not block.segment]
