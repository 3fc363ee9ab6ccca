"""The what-if: the recorded run with its fidelity, the tried settings, and the ranked answer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainwreck.errors import UsageError
from trainwreck.memory import replay as replaying
from trainwreck.memory.replay import Run
from trainwreck.memory.settings import AllocatorSettings, from_snapshot, parse_alloc_conf
from trainwreck.memory.snapshot import Snapshot

# The sweep without --try: the settings that change fragmentation, one at a time, and the
# usual pair.
DEFAULT_SWEEP = (
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8",
    "expandable_segments:True,garbage_collection_threshold:0.8",
)
# garbage_collection_threshold acts only with set_per_process_memory_fraction (malloc checks
# `set_fraction`); a sweep entry that sets it assumes the fraction 1.0 unless one is given.
ASSUMED_FRACTION = 1.0

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'80GiB', '80G', '512MiB', '1073741824': binary units, as torch's format_size prints."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not match:
        raise UsageError(f"--capacity {text!r}: expected a size such as 80GiB or 81920MiB")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0:
        raise UsageError(f"--capacity {text!r}: must be more than 0")
    return int(value)


def human(size: int | None) -> str:
    if size is None:
        return "unknown"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(size) >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


@dataclass
class WhatIf:
    snapshot: Snapshot
    capacity: int | None
    capacity_source: str
    recorded: Run
    runs: list[Run]
    answer: str
    settings_recorded: bool = True

    def ranked(self) -> list[Run]:
        return sorted(self.runs, key=lambda r: (r.ooms > 0, r.peak_reserved))


def _with_fraction(settings: AllocatorSettings, fraction: float | None) -> AllocatorSettings:
    if fraction is None and settings.memory_fraction is not None:
        return settings  # per_process_memory_fraction given in the settings themselves
    if fraction is None and settings.garbage_collection_threshold > 0:
        fraction = ASSUMED_FRACTION
    return settings.with_fraction(fraction)


def what_if(
    snap: Snapshot,
    tries: list[str] | None = None,
    capacity: int | None = None,
    memory_fraction: float | None = None,
    samples: int = 0,
) -> WhatIf:
    events = snap.events
    if capacity is not None:
        source = "--capacity"
    else:
        capacity = replaying.recorded_capacity(events)
        source = (
            "the recorded OOM: reserved plus the device's free memory then"
            if capacity is not None
            else "unlimited: the trace records no OOM; pass --capacity to test a limit"
        )
    if memory_fraction is not None and not 0.0 < memory_fraction <= 1.0:
        raise UsageError(f"--memory-fraction {memory_fraction}: must be in (0, 1]")
    trial_settings = [_with_fraction(parse_alloc_conf(t), memory_fraction) for t in tries or ()]
    recorded_settings = from_snapshot(snap.allocator_settings).with_fraction(memory_fraction)
    if not tries:
        trial_settings = [
            _with_fraction(parse_alloc_conf(t), memory_fraction) for t in DEFAULT_SWEEP
        ]
        if recorded_settings != AllocatorSettings().with_fraction(memory_fraction):
            trial_settings.insert(0, AllocatorSettings(text="defaults"))
    common = {
        "name": snap.path,
        "empty_cache_at": replaying.empty_cache_points(events),
        "synchronised": replaying.synchronised_frees(events),
        "fallbacks": replaying.fallback_candidates(events),
        "samples": samples,
    }
    recorded = replaying.replay(events, recorded_settings, capacity, check=True, **common)
    runs = [
        replaying.replay(events, s, capacity, **common)
        for s in trial_settings
        if tries or s != recorded_settings  # the sweep skips what the recorded run already is
    ]
    return WhatIf(
        snap,
        capacity,
        source,
        recorded,
        runs,
        answer(recorded, runs, capacity),
        isinstance(snap.allocator_settings, dict),
    )


def answer(recorded: Run, runs: list[Run], capacity: int | None) -> str:
    """One line: the best setting, or why none helps."""
    ranked = sorted(runs, key=lambda r: (r.ooms > 0, r.peak_reserved))
    if recorded.ooms:
        oom = recorded.first_oom
        assert oom is not None
        avoiding = [r for r in ranked if r.ooms == 0]
        if avoiding and capacity is not None:
            best = avoiding[0]
            others = f" ({len(avoiding) - 1} other setting(s) also do)" if len(avoiding) > 1 else ""
            return (
                f"{best.settings.label} avoids the OOM with {human(capacity - best.peak_reserved)} "
                f"to spare (peak reserved {human(best.peak_reserved)} of {human(capacity)}){others}"
            )
        need = oom.allocated + oom.size
        if capacity is not None and need > capacity:
            return (
                f"no setting tried avoids the OOM: at event {oom.event_index} the live tensors "
                f"({human(oom.allocated)}) plus the request ({human(oom.size)}) exceed the "
                f"capacity ({human(capacity)}); this is a capacity OOM, not fragmentation"
            )
        return (
            f"no setting tried avoids the OOM, though live tensors plus the request "
            f"({human(need)}) fit in {human(capacity)}: fragmentation no tried setting removes"
        )
    if not ranked:
        return f"no OOM under the recorded settings (peak reserved {human(recorded.peak_reserved)})"
    best = ranked[0]
    limit = f"at {human(capacity)}" if capacity is not None else "(capacity unlimited)"
    if best.peak_reserved < recorded.peak_reserved:
        return (
            f"no OOM under the recorded settings {limit}; {best.settings.label} reserves least: "
            f"{human(best.peak_reserved)} at peak, "
            f"{human(recorded.peak_reserved - best.peak_reserved)} less than recorded"
        )
    return (
        f"no OOM under the recorded settings {limit}, and no setting tried reserves less than "
        f"their {human(recorded.peak_reserved)} at peak"
    )
