"""The mutable state of a scan: per rule, its matchers' counts, evidence, first lines, captured
columns and events, and its series' points per rank; the limits that keep it bounded."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwreck.rules import detectors as det
from trainwreck.rules.captures import Plan, plan_of
from trainwreck.rules.reading import Skipped
from trainwreck.rules.registry import DETECTORS, EVENTS

MAX_EVIDENCE_PER_MATCHER = 24
MAX_ROWS = 1_000_000  # kept capture values / events per matcher
# Points held by all the series of one scan (48 bytes each: 72 MB). Past it the longest series
# is thinned (SeriesBuffer.thin), so memory stays bounded whatever the size of the input.
SERIES_BUDGET = 1_500_000
# Distinct ranks (or host labels) tracked per scan: each costs per-rank state in every matcher and
# series that sees it, so a log with a million distinct prefixes would otherwise cost gigabytes.
# Lines of further ranks are still read, with their rank unknown. (The largest jobs run tens of
# thousands of ranks.)
MAX_RANKS = 32_768


@dataclass(frozen=True)
class UnrankedFile:
    """The series key of lines whose rank is unknown, one per file: separate logs in one folder
    (a broken and a fixed run, say) are separate series, not one run's points end to end.
    Evaluation reports it as rank None (unknown); shown as such in detector notes."""

    file: int

    def __str__(self) -> str:
        return "None"


def series_key(rank: Any, file_id: int) -> Any:
    """The key of a line's series points: its rank, or its file when the rank is unknown."""
    return rank if rank is not None else UnrankedFile(file_id)


class SeriesBuffer:
    """The points of one series on one rank, as rows (value, index, t, file, line, offset) in one
    array of doubles: one append per point, 48 bytes a point (file, line and offset are whole
    numbers far below 2**53, so doubles hold them exactly). `offered` counts every point ever
    added (a positional index goes on counting there); `count` the rows held, fewer once the
    buffer was thinned."""

    __slots__ = ("count", "offered", "rows", "thinned")
    WIDTH = 6

    def __init__(self) -> None:
        self.rows = array("d")
        self.count = 0
        self.offered = 0
        self.thinned = False

    def add(
        self, value: float, index: float, t: float, file_id: int, line: int, offset: int
    ) -> None:
        self.rows.extend((value, index, t, file_id, line, offset))
        self.count += 1
        self.offered += 1

    def extend(self, other: SeriesBuffer, shift_index: bool = False) -> None:
        """Append another buffer's points. `shift_index`: their index is their position, which
        now starts after this buffer's points."""
        rows = other.rows
        if shift_index and other.count:
            rows = array("d", rows)
            table = np.frombuffer(rows, dtype=np.float64).reshape(-1, self.WIDTH)
            table[:, 1] += self.offered
        self.rows.extend(rows)
        self.count += other.count
        self.offered += other.offered
        self.thinned |= other.thinned

    def thin(self) -> int:
        """Halve the points held: of each two neighbours keep the one farther from the median
        value, so that spikes, stalls and level changes survive (each kept point keeps its own
        index, time and line). Returns how many points were dropped."""
        table = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.WIDTH)
        pairs = len(table) // 2
        if not pairs:
            return 0
        middle = float(np.median(table[:, 0]))
        first, second = table[0 : 2 * pairs : 2], table[1 : 2 * pairs : 2]
        later = np.abs(second[:, 0] - middle) > np.abs(first[:, 0] - middle)
        kept = np.where(later[:, None], second, first)
        if len(table) % 2:
            kept = np.concatenate((kept, table[-1:]))
        self.rows = array("d", kept.tobytes())
        dropped = self.count - len(kept)
        self.count = len(kept)
        self.thinned = True
        return dropped

    def points(self) -> det.Points:
        table = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.WIDTH)
        return det.Points(
            np.ascontiguousarray(table[:, 0]),
            np.ascontiguousarray(table[:, 1]),
            np.ascontiguousarray(table[:, 2]),
            table[:, 3].astype(np.int64),
            table[:, 4].astype(np.int64),
            table[:, 5].astype(np.int64),
        )


@dataclass
class Evidence:
    file: int
    line: int
    text: str
    rank: Any
    t: float
    part: str
    offset: int = -1


@dataclass
class MatcherState:
    count: int = 0
    rank_counts: dict[Any, int] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    first: dict[Any, tuple[float, int, int]] = field(
        default_factory=dict
    )  # rank -> (t, file, line)
    columns: dict[str, list[Any]] = field(default_factory=dict)
    events: list[tuple[Any, float, float, int, int, int]] | None = (
        None  # rank, t, step, file, line, offset
    )
    truncated: bool = False


class RuleRun:
    """The mutable state of one rule during a scan."""

    def __init__(self, rule: dict[str, Any]):
        self.rule = rule
        self.matchers: dict[str, MatcherState] = {name: MatcherState() for name in rule["matchers"]}
        for part, name in rule.get("fields", []):
            self.matchers[part].columns[name] = []
        event_parts = {
            spec[role]
            for spec in rule["detectors"].values()
            if DETECTORS[spec["kind"]].inputs == EVENTS
            for role in DETECTORS[spec["kind"]].references
        }
        for name in event_parts & set(rule["matchers"]):
            self.matchers[name].events = []
        self.series: dict[str, dict[Any, SeriesBuffer]] = {name: {} for name in rule["series"]}
        self.feeds: dict[str, list[tuple[str, str, str | None]]] = {}
        for name, spec in rule["series"].items():
            for matcher in spec["matchers"]:
                self.feeds.setdefault(matcher, []).append((name, spec["value"], spec.get("index")))
        self.counters: dict[tuple[str, Any], int] = {}
        # Per matcher: how its captures convert (captures.Plan).
        self.plans: dict[str, Plan] = {
            name: plan_of(spec["values"]) for name, spec in rule["matchers"].items()
        }
        self.blocks: dict[tuple[str, int, Any], tuple[int, dict[str, Any], Evidence]] = {}


@dataclass
class ScanResult:
    runs: list[RuleRun]
    files: list[str]
    skipped: list[Skipped]
    ranks_seen: set[Any]
    lines: int
    bytes: int
    unranked: int = 0  # lines whose rank was dropped because MAX_RANKS ranks were already seen

    def admit_rank(self, rank: Any) -> Any:
        """`rank`, or None once MAX_RANKS other ranks were seen (memory stays bounded)."""
        if rank is None or rank in self.ranks_seen:
            return rank
        if len(self.ranks_seen) >= MAX_RANKS:
            self.unranked += 1
            return None
        self.ranks_seen.add(rank)
        return rank


# --- the compiled rule set ------------------------------------------------------------------------


def thin_series(runs: list[RuleRun], budget: int) -> None:
    """Thin the longest series until all of them together hold at most `budget` points (series
    shared by several rules are counted once)."""
    buffers = {
        id(buffer): buffer
        for run in runs
        for per_rank in run.series.values()
        for buffer in per_rank.values()
    }
    total = sum(buffer.count for buffer in buffers.values())
    while total > budget:
        longest = max(buffers.values(), key=lambda buffer: buffer.count)
        dropped = longest.thin()
        if not dropped:
            return
        total -= dropped
