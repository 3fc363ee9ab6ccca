"""Allocator settings and the `PYTORCH_CUDA_ALLOC_CONF` syntax, as the allocator parses it.

Sources (pytorch/pytorch): the parser c10/core/AllocatorConfig.cpp (`parseArgs`,
`parseMaxSplitSize`, `parseMaxNonSplitRoundingSize`, `parseGarbageCollectionThreshold`,
`parseRoundUpPower2Divisions`, `roundup_power2_divisions(size)`), and torch 2.13.0's installed
header c10/core/AllocatorConfig.h (lines 180-214: the getters and defaults; lines 342-353: the
members, max_split_size unlimited, garbage_collection_threshold 0, expandable segments off).
Older trees (2.1 to about 2.6) kept the same keys in c10/cuda/CUDAAllocatorConfig.cpp;
`max_non_split_rounding_mb` is newer (the older get_free_block uses kLargeBuffer, 20 MiB, in
its place, which is also the newer default).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainwreck.errors import UsageError

MIB = 1 << 20
K_LARGE_BUFFER = 20 * MIB  # kLargeBuffer, CUDACachingAllocator.cpp / AllocatorConfig.h
UNLIMITED = (1 << 64) - 1  # std::numeric_limits<size_t>::max(): max_split_size's default
# AllocatorConfig.cpp: kRoundUpPowerOfTwoIntervals = 16, from 1 MiB (index 0) to 64 GiB.
POWER2_INTERVALS = 16

# Keys the parser accepts that change nothing the model replays (locking, pinned host memory).
IGNORED_KEYS = frozenset(
    {
        "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register",
        "pinned_num_register_threads",
        "pinned_use_background_threads",
        "pinned_reserve_segment_size_mb",
        "graph_capture_record_stream_reuse",
        "pinned_max_round_threshold_mb",
        "pinned_max_cached_size_mb",
        "pinned_free_catch_all",
    }
)
# Keys of newer releases (torch 2.13.0: CUDAAllocatorConfig.h lines 155-175, the key list, and
# libc10.so's strings) that change what the allocator does in ways this model does not follow:
# refused rather than silently replayed as if absent.
NOT_MODELLED = frozenset({"large_segment_size_mb", "throw_on_cudamalloc_oom"})


@dataclass(frozen=True)
class AllocatorSettings:
    """What the model reads of the allocator's configuration."""

    max_split_size: int = UNLIMITED
    max_non_split_rounding: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    # 16 division counts, one per power-of-two interval from 1 MiB; 0 or 1 means plain rounding.
    roundup_power2_divisions: tuple[int, ...] = (0,) * POWER2_INTERVALS
    expandable_segments: bool = False
    # torch.cuda.set_per_process_memory_fraction: not an ALLOC_CONF key, but it sets
    # `set_fraction`, without which garbage_collection_threshold does nothing.
    memory_fraction: float | None = None
    text: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return self.text or "defaults"

    def with_fraction(self, fraction: float | None) -> AllocatorSettings:
        if fraction is None:
            return self
        label = f"{self.label} + memory fraction {fraction:g}"
        return replace(self, memory_fraction=fraction, text=label)


def _tokens(text: str) -> list[str]:
    """ConfigTokenizer / lexArgs: ',', ':', '[' and ']' are tokens of their own; spaces dropped."""
    tokens: list[str] = []
    buffer = ""
    for ch in text:
        if ch in ",:[]":
            if buffer:
                tokens.append(buffer)
                buffer = ""
            tokens.append(ch)
        elif not ch.isspace():
            buffer += ch
    if buffer:
        tokens.append(buffer)
    return tokens


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0

    def fail(self, message: str) -> UsageError:
        return UsageError(f"allocator setting {self.text!r}: {message}")

    def take(self, expected: str | None = None) -> str:
        if self.i >= len(self.tokens):
            raise self.fail(f"expected {expected or 'a value'} at the end")
        token = self.tokens[self.i]
        self.i += 1
        if expected is not None and token != expected:
            raise self.fail(f"expected {expected!r}, got {token!r}")
        return token

    def integer(self, what: str) -> int:
        token = self.take()
        if not token.isdigit():
            raise self.fail(f"{what} must be a whole number, got {token!r}")
        return int(token)


def parse_alloc_conf(text: str, base: AllocatorSettings | None = None) -> AllocatorSettings:
    """Settings from `PYTORCH_CUDA_ALLOC_CONF` syntax, e.g. "expandable_segments:True,
    max_split_size_mb:128", checked as the allocator checks them; UsageError otherwise."""
    settings = base or AllocatorSettings()
    p = _Parser(text)
    values: dict[str, object] = {}
    divisions = list(settings.roundup_power2_divisions)
    while p.i < len(p.tokens):
        key = p.take()
        p.take(":")
        if key == "max_split_size_mb":
            value = p.integer(key)
            # parseMaxSplitSize: "too small, must be >= 20" (kLargeBuffer / kMB).
            if value < K_LARGE_BUFFER // MIB:
                raise p.fail("max_split_size_mb must be >= 20, as the allocator requires")
            values["max_split_size"] = min(value * MIB, UNLIMITED)
        elif key == "max_non_split_rounding_mb":
            value = p.integer(key)
            if value < K_LARGE_BUFFER // MIB:
                raise p.fail("max_non_split_rounding_mb must be >= 20, as the allocator requires")
            values["max_non_split_rounding"] = value * MIB
        elif key == "garbage_collection_threshold":
            token = p.take()
            try:
                threshold = float(token)
            except ValueError:
                raise p.fail(
                    f"garbage_collection_threshold must be a number, got {token!r}"
                ) from None
            # parseGarbageCollectionThreshold: "set it in (0.0, 1.0)".
            if not 0.0 < threshold < 1.0:
                raise p.fail("garbage_collection_threshold must be in (0.0, 1.0)")
            values["garbage_collection_threshold"] = threshold
        elif key == "expandable_segments":
            token = p.take()
            if token not in ("True", "False"):
                raise p.fail("expandable_segments takes True or False")
            values["expandable_segments"] = token == "True"
        elif key == "roundup_power2_divisions":
            divisions = _parse_divisions(p)
        elif key == "backend":
            token = p.take()
            if token != "native":
                raise p.fail(f"backend:{token} is not the caching allocator; nothing to replay")
        elif key == "per_process_memory_fraction":
            # 2.13's ALLOC_CONF form of set_per_process_memory_fraction.
            token = p.take()
            try:
                fraction = float(token)
            except ValueError:
                raise p.fail(
                    f"per_process_memory_fraction must be a number, got {token!r}"
                ) from None
            if not 0.0 < fraction <= 1.0:
                raise p.fail("per_process_memory_fraction must be in (0.0, 1.0]")
            values["memory_fraction"] = fraction
        elif key in NOT_MODELLED:
            raise p.fail(f"{key} is not modelled by the replay")
        elif key in IGNORED_KEYS:
            p.take()
        else:
            raise p.fail(f"unrecognized option {key!r}")
        if p.i < len(p.tokens):
            p.take(",")
    return replace(settings, **values, roundup_power2_divisions=tuple(divisions), text=text)  # type: ignore[arg-type]


def _parse_divisions(p: _Parser) -> list[int]:
    """parseRoundUpPower2Divisions: one count for every interval, or `[1:4,256:2,>:1]` (MiB
    boundaries, powers of two; the first value also fills the intervals below it)."""
    divisions = [0] * POWER2_INTERVALS
    if p.i < len(p.tokens) and p.tokens[p.i] != "[":
        value = p.integer("roundup_power2_divisions")
        if not _is_power_of_two(value):
            raise p.fail("roundup_power2_divisions must be a power of 2")
        return [value] * POWER2_INTERVALS
    p.take("[")
    first = True
    last_index = 0
    while True:
        bound = p.take()
        if bound == "]":
            break
        p.take(":")
        value = p.integer("a division count")
        if value != 0 and not _is_power_of_two(value):
            raise p.fail("division counts must be a power of 2, or 0 to disable rounding")
        if bound == ">":
            divisions[last_index:] = [value] * (POWER2_INTERVALS - last_index)
        else:
            if not bound.isdigit() or not _is_power_of_two(int(bound)):
                raise p.fail(f"interval {bound!r} must be a power of 2 (in MiB)")
            index = min(int(bound).bit_length() - 1, POWER2_INTERVALS - 1)
            if first:
                divisions[:index] = [value] * index
                first = False
            divisions[index] = value
            last_index = index
        if p.i < len(p.tokens) and p.tokens[p.i] == ",":
            p.take(",")
    return divisions


def from_snapshot(recorded: object) -> AllocatorSettings:
    """The settings a snapshot's `allocator_settings` records. The raw ALLOC_CONF string wins
    when present; otherwise the parsed fields the snapshot carries are read one by one."""
    if not isinstance(recorded, dict):
        return AllocatorSettings(text="defaults")
    raw = recorded.get("PYTORCH_CUDA_ALLOC_CONF")
    if isinstance(raw, str) and raw.strip():
        return parse_alloc_conf(raw)
    values: dict[str, object] = {}
    parts = []
    if recorded.get("expandable_segments") is True:
        values["expandable_segments"] = True
        parts.append("expandable_segments:True")
    split = recorded.get("max_split_size")
    if isinstance(split, int) and 0 < split < UNLIMITED and split != -1:
        values["max_split_size"] = split
        parts.append(f"max_split_size_mb:{split // MIB}")
    threshold = recorded.get("garbage_collection_threshold")
    if isinstance(threshold, float) and 0.0 < threshold < 1.0:
        values["garbage_collection_threshold"] = threshold
        parts.append(f"garbage_collection_threshold:{threshold:g}")
    return replace(AllocatorSettings(), **values, text=",".join(parts))  # type: ignore[arg-type]


def roundup_power2_divisions(settings: AllocatorSettings, size: int) -> int:
    """AllocatorConfig::roundup_power2_divisions(size): the interval is log2(size) - log2(1 MiB),
    clamped to [0, 15]."""
    index = size.bit_length() - 1 - 20
    index = max(0, min(index, POWER2_INTERVALS - 1))
    return settings.roundup_power2_divisions[index]
