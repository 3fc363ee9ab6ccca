"""A model of the CUDA caching allocator's rules, on plain integers.

Read from pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp at commit 001074d (the revision
cited below by function; the 2.13.0 constants are in the installed header
c10/core/AllocatorConfig.h lines 16-25 and AllocatorConfig.cpp). What each function follows:

- `round_size` / `roundup_power2_next_division`: 512-byte rounding, power-of-two divisions;
- `get_pool`: requests of at most kSmallSize (1 MiB) go to the small pool, others to large;
- `get_allocation_size`: 2 MiB segments for small requests, 20 MiB below kMinLargeAlloc
  (10 MiB), larger ones rounded up to kRoundLarge (2 MiB);
- `get_free_block`: best fit by (stream, size, address) on the request's stream, with the
  max_split_size rules (no oversize block for a smaller request; an oversize request accepts a
  block at most max_non_split_rounding (kLargeBuffer, 20 MiB, in older trees) larger);
- `should_split` and `alloc_found_block`: split when the remainder is >= 512 B (small pool, or
  expandable segments) or > 1 MiB for a request below max_split_size (large pool);
- `free_block` / `try_merge_blocks`: merge with free neighbours of the same mapped state;
- `malloc`'s fallback order: free block, garbage collection (only with set_fraction),
  cudaMalloc, `release_available_cached_blocks` (only with max_split_size set), then
  `release_cached_blocks` (synchronise pending frees, free every unsplit segment), then OOM;
- `garbage_collect_cached_blocks`: free unsplit large blocks older than the mean age until the
  reserved total is under threshold * allowed_memory_maximum.

Expandable segments live in `expandable.py`. Not modelled: CUDA-graph private pools and
MemPools, free-memory callbacks (IPC), `backend:cudaMallocAsync`, the driver's own allocation
granularity and fragmentation of physical memory.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from trainwreck.memory.settings import UNLIMITED, AllocatorSettings, roundup_power2_divisions

K_MIN_BLOCK = 512  # kMinBlockSize
K_SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" request
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
K_ROUND_LARGE = 2 << 20  # kRoundLarge
# Model addresses for segments it invents: far above any real device address (< 2**48), so they
# never meet the recorded addresses the fidelity replay reuses.
MODEL_ADDRESS_BASE = 1 << 56


class Block:
    """A piece of a segment: free (in its pool), allocated, or waiting for a deferred free."""

    __slots__ = (
        "addr",
        "allocated",
        "gc_base",
        "mapped",
        "next",
        "pending",
        "prev",
        "requested",
        "segment",
        "size",
        "small",
        "stream",
    )

    def __init__(self, addr: int, size: int, stream: int, small: bool) -> None:
        self.addr = addr
        self.size = size
        self.stream = stream
        self.small = small
        self.allocated = False
        self.pending = False  # free requested, completion deferred (record_stream events)
        self.prev: Block | None = None
        self.next: Block | None = None
        self.mapped = True
        self.segment: object | None = None  # the ExpandableSegment, when in one
        self.requested = 0
        self.gc_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class Pool:
    """BlockPool: free mapped blocks ordered by (stream, size, address) (BlockComparatorSize),
    and unmapped expandable ranges ordered by (stream, address) (BlockComparatorAddress)."""

    __slots__ = ("by_key", "free_calls", "keys", "small", "unmapped", "unmapped_by_key")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[tuple[int, int, int]] = []
        self.by_key: dict[tuple[int, int, int], Block] = {}
        self.unmapped: list[tuple[int, int]] = []
        self.unmapped_by_key: dict[tuple[int, int], Block] = {}
        self.free_calls = 0  # get_free_blocks_call_count, the clock of the GC's block ages

    def insert(self, block: Block) -> None:
        key = (block.stream, block.size, block.addr)
        insort(self.keys, key)
        self.by_key[key] = block
        block.gc_base = self.free_calls  # insert_into_blocks

    def remove(self, block: Block) -> None:
        key = (block.stream, block.size, block.addr)
        del self.keys[bisect_left(self.keys, key)]
        del self.by_key[key]

    def insert_unmapped(self, block: Block) -> None:
        key = (block.stream, block.addr)
        insort(self.unmapped, key)
        self.unmapped_by_key[key] = block

    def remove_unmapped(self, block: Block) -> None:
        key = (block.stream, block.addr)
        del self.unmapped[bisect_left(self.unmapped, key)]
        del self.unmapped_by_key[key]

    def largest(self) -> int:
        return max((key[1] for key in self.keys), default=0)


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """1200 B with 4 divisions: between 1024 and 2048 the steps are 1024, 1280, 1536, 1792, so
    1280. A power of two stays as it is."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(size: int, settings: AllocatorSettings) -> int:
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    divisions = roundup_power2_divisions(settings, size)
    if divisions > 1 and size > K_MIN_BLOCK * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Allocator:
    """One device's allocator. `capacity` is the physical memory cudaMalloc may take (None:
    unlimited); `device_total` sizes the memory fraction and expandable address space."""

    def __init__(
        self,
        settings: AllocatorSettings,
        capacity: int | None = None,
        device_total: int | None = None,
    ) -> None:
        self.settings = settings
        self.capacity = capacity
        total = device_total or capacity
        # setMemoryFraction: allowed_memory_maximum = fraction * device total; set_fraction.
        self.allowed: int | None = None
        if settings.memory_fraction is not None and total is not None:
            self.allowed = int(settings.memory_fraction * total)
        self.gc_active = self.allowed is not None and settings.garbage_collection_threshold > 0
        # Without roundup_power2_divisions every size rounds to 512 B: the hot path skips the
        # interval lookup.
        self.plain_rounding = all(d <= 1 for d in settings.roundup_power2_divisions)
        self.device_total = total or (1 << 40)
        self.small = Pool(True)
        self.large = Pool(False)
        self.reserved = 0  # total_allocated_memory: cudaMalloc'd or mapped bytes
        self.allocated = 0  # bytes of blocks handed out and not yet freed
        self.pending: set[Block] = set()
        self.device_allocs = 0  # num_device_alloc: cudaMalloc calls and page maps
        self.device_frees = 0  # num_device_free: cudaFree calls and unmaps
        self.retries = 0  # num_alloc_retries
        # (action, address, size, stream) of every segment event, as record_trace would log it.
        self.log: list[tuple[str, int, int, int]] = []
        self.next_address = MODEL_ADDRESS_BASE
        # alloc_size -> recorded cudaMalloc addresses to reuse, in order (fidelity replay only).
        self.address_hints: dict[int, list[int]] | None = None
        self.expandable = None
        if settings.expandable_segments:
            from trainwreck.memory.expandable import Expandable

            self.expandable = Expandable(self)

    # malloc and its fallbacks

    def malloc(self, orig_size: int, stream: int) -> Block | None:
        """DeviceCachingAllocator::malloc; None where it would raise OutOfMemoryError."""
        if self.plain_rounding:
            size = K_MIN_BLOCK * ((orig_size + K_MIN_BLOCK - 1) // K_MIN_BLOCK) or K_MIN_BLOCK
        else:
            size = round_size(orig_size, self.settings)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        alloc_size = allocation_size(size)
        block = self.get_free_block(pool, stream, size)
        if block is None:
            if self.gc_active:
                self.garbage_collect()
            block = (
                self.alloc_block(pool, stream, size, alloc_size)
                or (
                    self.release_available_cached_blocks(pool, stream, size)
                    and self.alloc_block(pool, stream, size, alloc_size)
                )
                or (
                    self.release_cached_blocks()
                    and self.alloc_block(pool, stream, size, alloc_size, retry=True)
                )
            )
            if block is None:
                return None
        if self.should_split(block, size):
            block = self.split(block, size, pool)
        block.allocated = True
        block.requested = orig_size
        self.allocated += block.size
        return block

    def get_free_block(self, pool: Pool, stream: int, size: int, take: bool = True) -> Block | None:
        """The best-fit free block, removed from its pool; with `take=False` only looked at."""
        if self.gc_active and take:
            pool.free_calls += 1
        keys = pool.keys
        i = bisect_left(keys, (stream, size, -1))
        if i == len(keys) or keys[i][0] != stream:
            return None
        by_key = pool.by_key
        block = by_key[keys[i]]
        if block.segment is not None and self.expandable is not None:
            # Best fit by the size a block can grow to: its size plus the unmapped range after it.
            def grows_to(b: Block) -> int:
                nxt = b.next
                return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

            j = i + 1
            while (
                block.segment is not None
                and j < len(keys)
                and keys[j][0] == stream
                and grows_to(by_key[keys[j]]) < grows_to(block)
            ):
                i, j = j, j + 1
                block = by_key[keys[i]]
        max_split = self.settings.max_split_size
        if size < max_split and block.size >= max_split:
            return None  # an oversize block is not handed to a smaller request
        if size >= max_split and block.size >= size + self.settings.max_non_split_rounding:
            return None  # an oversize request takes an oversize block only if nearly its size
        if not take:
            return block
        del keys[i]
        del by_key[(block.stream, block.size, block.addr)]
        return block

    def frees_first(self, orig_size: int, stream: int) -> bool:
        """Whether malloc could free segments before it cudaMallocs for this request: not when
        the cache serves it (malloc looks there first), nor when the first cudaMalloc fits
        (garbage collection aside, it frees only after a failed one). Changes nothing."""
        size = round_size(orig_size, self.settings)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        if self.get_free_block(pool, stream, size, take=False) is not None:
            return False
        gc_limit = self.settings.garbage_collection_threshold * (self.allowed or 0)
        if self.gc_active and self.reserved > gc_limit:
            return True  # garbage collection frees before the cudaMalloc
        need = allocation_size(size)
        if self.expandable is not None:  # at most this many pages; fewer after a free block
            page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
            need = -(-size // page) * page
        limits = [x for x in (self.capacity, self.allowed) if x is not None]
        return not limits or self.reserved + need > min(limits)

    def should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.small or self.expandable is not None:
            return remaining >= K_MIN_BLOCK
        return size < self.settings.max_split_size and remaining > K_SMALL_SIZE

    def split(self, block: Block, size: int, pool: Pool) -> Block:
        """alloc_found_block's split: the front `size` bytes are handed out, the rest stays free."""
        front = Block(block.addr, size, block.stream, block.small)
        front.segment = block.segment
        front.prev = block.prev
        if front.prev is not None:
            front.prev.next = front
        front.next = block
        block.prev = front
        block.addr += size
        block.size -= size
        pool.insert(block)
        return front

    def alloc_block(
        self, pool: Pool, stream: int, size: int, alloc_size: int, retry: bool = False
    ) -> Block | None:
        if retry:
            self.retries += 1
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None
        if self.expandable is not None:
            return self.expandable.allocate(pool, stream, size)
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None  # cudaMalloc: cudaErrorMemoryAllocation
        address = self._segment_address(alloc_size)
        self.reserved += alloc_size
        self.device_allocs += 1
        self.log.append(("segment_alloc", address, alloc_size, stream))
        return Block(address, alloc_size, stream, pool.small)

    def _segment_address(self, alloc_size: int) -> int:
        hints = self.address_hints
        if hints:
            queue = hints.get(alloc_size)
            if queue:
                return queue.pop(0)
        address = self.next_address
        self.next_address += alloc_size
        return address

    def release_available_cached_blocks(self, pool: Pool, stream: int, size: int) -> bool:
        """Free one oversize cached block of at least max(size, max_split_size), or, when none
        is that large, the largest oversize blocks until their total reaches it."""
        max_split = self.settings.max_split_size
        if max_split == UNLIMITED:
            return False
        wanted = max(size, max_split)
        keys = pool.keys
        i = bisect_left(keys, (stream, wanted, -1))
        if i < len(keys) and keys[i][0] == stream:
            block = pool.by_key[keys[i]]
            if block.segment is not None:
                return False
            self.release_block(block, pool)
            return True
        if i == 0:
            return False
        released = 0
        i -= 1
        while released < wanted and keys[i][1] >= max_split and keys[i][0] == stream:
            block = pool.by_key[keys[i]]
            if block.segment is not None:
                break
            released += block.size
            self.release_block(block, pool)
            if i == 0:
                break
            i -= 1
        return released >= wanted

    def release_cached_blocks(self) -> bool:
        """Synchronise every pending free (synchronize_and_free_events), then free every unsplit
        cached segment, large pool first, and unmap free expandable pages."""
        for block in sorted(self.pending, key=lambda b: b.addr):
            self.free_block(block)
        self.release_blocks(self.large)
        self.release_blocks(self.small)
        return True

    def release_blocks(self, pool: Pool) -> None:
        to_unmap = []
        for key in list(pool.keys):
            block = pool.by_key[key]
            if block.segment is not None:
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self.release_block(block, pool)
        if to_unmap and self.expandable is not None:
            self.expandable.release(pool, to_unmap)

    def release_block(self, block: Block, pool: Pool) -> None:
        self.device_frees += 1
        self.log.append(("segment_free", block.addr, block.size, block.stream))
        self.reserved -= block.size
        pool.remove(block)

    def garbage_collect(self) -> None:
        """garbage_collect_cached_blocks: reclaim unsplit large blocks of above-mean age."""
        assert self.allowed is not None
        threshold = int(self.settings.garbage_collection_threshold * self.allowed)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pool = self.large
        clock = pool.free_calls
        candidates = [b for b in pool.by_key.values() if not b.is_split()]
        total_age = sum(clock - b.gc_base for b in candidates)
        count = len(candidates)
        reclaimed = 0
        freed = True
        while reclaimed < target and freed and count > 0:
            age_threshold = total_age / count
            freed = False
            for key in list(pool.keys):
                block = pool.by_key.get(key)
                if block is None or block.is_split() or block.segment is not None:
                    continue
                age = clock - block.gc_base
                if age >= age_threshold:
                    freed = True
                    reclaimed += block.size
                    total_age -= age
                    count -= 1
                    self.release_block(block, pool)

    # free

    def free_requested(self, block: Block) -> None:
        """`free`: the block stops counting as allocated; it returns to the pool when its free
        completes (at once, or after the streams it was recorded on are done)."""
        block.allocated = False
        block.pending = True
        self.allocated -= block.size
        self.pending.add(block)

    def free_block(self, block: Block) -> None:
        block.pending = False
        self.pending.discard(block)
        pool = self.small if block.small else self.large
        if block.prev is not None:
            self.merge(block, block.prev, pool)
        if block.next is not None:
            self.merge(block, block.next, pool)
        pool.insert(block)

    def merge(self, dst: Block, src: Block | None, pool: Pool) -> int:
        """try_merge_blocks: absorb a free neighbour with the same mapped state."""
        if src is None or src.allocated or src.pending or dst.mapped != src.mapped:
            return 0
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        dst.size += src.size
        return src.size

    def largest_free(self) -> int:
        return max(self.small.largest(), self.large.largest())
