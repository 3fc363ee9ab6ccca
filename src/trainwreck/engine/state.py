"""The mutable state of a scan: per rule, its matchers' counts, evidence, first lines, captured
columns and events, and its series' points per rank; the limits that keep it bounded."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainwreck.engine import detectors as det
from trainwreck.engine.captures import Plan, plan_of
from trainwreck.findings import Evidence, FirstKey, Skipped
from trainwreck.rules.rule import Rule

if TYPE_CHECKING:
    from trainwreck.engine.tracebacks import Unit

MAX_EVIDENCE_PER_MATCHER = 24
MAX_ROWS = 1_000_000  # kept capture values / events per matcher
# Points held by all the series of one scan (56 bytes each: 56 MB). Past it the longest series
# is thinned (SeriesBuffer.thin), so memory stays bounded whatever the size of the input.
SERIES_BUDGET = 1_000_000
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
    """The points of one series on one rank, as rows (value, index, t, file, line, offset,
    sample) in one array of doubles: one append per point, 56 bytes a point (file, line and
    offset are whole numbers far below 2**53, so doubles hold them exactly). `offered` counts
    every point ever added (a positional index goes on counting there); `count` the rows held.

    Past the memory budget (thin_series) a buffer is thinned: it keeps a regular sample, the
    points whose index (the step, or the position) is a multiple of `stride`, on every rank
    alike, and every point that stands out from that sample (OUTLIER_MADS median absolute
    deviations from its median), flagged sample 0. Detectors take their baselines from the
    sample, so a thinned series keeps its statistics, and its stalls and spikes."""

    __slots__ = ("center", "count", "offered", "outlier_stride", "rows", "spread", "stride")
    WIDTH = 7
    OUTLIER_MADS = 6.0

    def __init__(self) -> None:
        self.rows = array("d")
        self.count = 0
        self.offered = 0
        self.stride = 1  # 1: every point is kept
        self.outlier_stride = 1  # points that stand out are kept on this grid
        self.center = math.nan  # the sample's median and MAD when last thinned
        self.spread = math.nan

    @property
    def thinned(self) -> bool:
        return self.stride > 1

    def add(
        self, value: float, index: float, t: float, file_id: int, line: int, offset: int
    ) -> None:
        self.offered += 1
        sample = 1.0
        if self.stride > 1:  # (as keeps, for one point)
            key = index if math.isfinite(index) else line
            sample = 1.0 if math.floor(key) % self.stride == 0 else 0.0
            if not sample and not (
                abs(value - self.center) > self.OUTLIER_MADS * self.spread
                and math.floor(key) % self.outlier_stride == 0
            ):
                return
        self.rows.extend((value, index, t, file_id, line, offset, sample))
        self.count += 1

    def keeps(
        self, values: np.ndarray, index: np.ndarray, lines: np.ndarray
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Which of these new points the buffer keeps (None: all) and, of those, which are
        sample points (None: all): add, for many points at once."""
        if self.stride == 1:
            return None, None
        keys = _grid_keys(index, lines)
        sample = (keys & (self.stride - 1)) == 0
        outlier = np.abs(values - self.center) > self.OUTLIER_MADS * self.spread
        outlier &= (keys & (self.outlier_stride - 1)) == 0
        keep = sample | outlier
        return keep, sample[keep]

    def extend(self, other: SeriesBuffer, shift_index: bool = False) -> None:
        """Append another buffer's points. `shift_index`: their index is their position, which
        now starts after this buffer's points. Buffers thinned alike on different ranges keep
        the coarser grid."""
        table = np.frombuffer(other.rows, dtype=np.float64).reshape(-1, self.WIDTH).copy()
        if shift_index:
            table[:, 1] += self.offered
        if (other.stride, other.outlier_stride) > (self.stride, self.outlier_stride):
            self._restride(other.stride, other.outlier_stride, other.center, other.spread)
        if self.stride > 1:
            table = _regrid(table, self.stride, self.outlier_stride)
        self.append(table)
        self.offered += other.offered

    def append(self, table: np.ndarray) -> None:
        """Append rows (a WIDTH-column array) as they are: no copy beyond the array's own."""
        if len(table):
            self.rows.frombytes(memoryview(np.ascontiguousarray(table)).cast("B"))
            self.count += len(table)

    def _restride(self, stride: int, outlier_stride: int, center: float, spread: float) -> None:
        stride, outlier_stride = max(stride, self.stride), max(outlier_stride, self.outlier_stride)
        table = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.WIDTH)
        table = _regrid(table, stride, outlier_stride)
        self.rows = _rows_of(table)
        self.count = len(table)
        self.stride, self.outlier_stride = stride, outlier_stride
        if not math.isfinite(self.center):
            self.center, self.spread = center, spread

    def thin(self) -> int:
        """Halve the sample (double the stride) and keep the points that stand out from it.
        Returns how many points were dropped."""
        table = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.WIDTH)
        if len(table) < 2:
            return 0
        sample = table[:, 6] == 1
        values = table[sample, 0] if sample.any() else table[:, 0]
        center = float(np.median(values))
        spread = float(np.median(np.abs(values - center)))
        stride = self.stride * 2
        on_grid = sample & _on_grid(table, stride)
        outlier = ~on_grid & (np.abs(table[:, 0] - center) > self.OUTLIER_MADS * spread)
        outlier_stride = self.outlier_stride
        outlier &= _on_grid(table, outlier_stride)
        while outlier.sum() > max(len(table) // 2, 1):
            # Points that stand out are half of what is held (frequent stalls, a wide
            # distribution): they are thinned on a grid of their own, alike on every rank.
            outlier_stride *= 2
            outlier &= _on_grid(table, outlier_stride)
        keep = on_grid | outlier
        if keep.sum() > 0.75 * len(table):
            return 0  # the index does not spread the points over the grid: no progress here
        kept = np.ascontiguousarray(table[keep])
        kept[:, 6] = on_grid[keep]
        self.rows = _rows_of(kept)
        dropped = self.count - len(kept)
        self.count = len(kept)
        self.stride, self.center, self.spread = stride, center, spread
        self.outlier_stride = outlier_stride
        return dropped

    def points(self) -> det.Points:
        # One copy of the rows, column by column (each column contiguous).
        columns = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.WIDTH).T.copy()
        whole = columns[3:6].astype(np.int64)
        return det.Points(
            columns[0], columns[1], columns[2], whole[0], whole[1], whole[2], columns[6] == 1
        )


def _rows_of(table: np.ndarray) -> array[float]:
    """A buffer's rows from a WIDTH-column array, in one copy (array("d", table.tobytes())
    makes two)."""
    rows = array("d")
    if table.size:  # (an empty view cannot be cast)
        rows.frombytes(memoryview(np.ascontiguousarray(table)).cast("B"))
    return rows


def _grid_keys(index: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """Where points sit on the thinning grid: the whole number at or below their index, or
    their line number when the index is not a number (SeriesBuffer.add, scalar)."""
    return np.floor(np.where(np.isfinite(index), index, lines)).astype(np.int64)


def _on_grid(table: np.ndarray, stride: int) -> np.ndarray:
    """Rows on the grid of `stride` (a power of two: the low bits of their key are zero)."""
    return (_grid_keys(table[:, 1], table[:, 4]) & (stride - 1)) == 0


def _regrid(table: np.ndarray, stride: int, outlier_stride: int) -> np.ndarray:
    """Rows of a thinned series on coarser grids: its sample points on the grid of `stride`,
    its flagged points on the grid of `outlier_stride`."""
    sample = table[:, 6] == 1
    on_grid = sample & _on_grid(table, stride)
    keep = on_grid | (~sample & _on_grid(table, outlier_stride))
    kept = np.ascontiguousarray(table[keep])
    kept[:, 6] = on_grid[keep]
    return kept


@dataclass
class MatcherState:
    count: int = 0
    rank_counts: dict[Any, int] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    first: dict[Any, FirstKey] = field(default_factory=dict)  # rank -> its first line
    columns: dict[str, list[Any]] = field(default_factory=dict)
    # Point events (index: the line's 'step' capture), kept for the event detectors that read
    # this matcher (cooccur); None when none does.
    events: list[det.Event] | None = None
    truncated: bool = False
    # Of `count`, the matches of tracebacks cut before their exception line (on frames alone).
    cut: int = 0


class RuleRun:
    """The mutable state of one rule during a scan."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self.matchers: dict[str, MatcherState] = {name: MatcherState() for name in rule.matchers}
        for part, name in rule.fields:
            self.matchers[part].columns[name] = []
        for name in rule.event_parts() & set(rule.matchers):
            self.matchers[name].events = []
        self.series: dict[str, dict[Any, SeriesBuffer]] = {name: {} for name in rule.series}
        self.feeds: dict[str, list[tuple[str, str, str | None]]] = {}
        for name, spec in rule.series.items():
            for matcher in spec.matchers:
                self.feeds.setdefault(matcher, []).append((name, spec.value, spec.index))
        # Per matcher: how its captures convert (captures.Plan).
        self.plans: dict[str, Plan] = {
            name: plan_of(matcher.values) for name, matcher in rule.matchers.items()
        }
        self.blocks: dict[tuple[str, int, Any], tuple[int, dict[str, Any], Evidence]] = {}
        # The traceback open per (matcher, file, rank) (engine/tracebacks.py).
        self.tracebacks: dict[tuple[str, int, Any], Unit] = {}


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


@dataclass(slots=True)
class FileScan:
    """One input as it is scanned: its position in the scan and its name (what evidence and
    first lines record), the rank its path names, and the state the scan records into."""

    file_id: int
    name: str
    rank: Any  # the rank (or host label) of the input's path, or None
    runs: list[RuleRun]
    result: ScanResult


@dataclass(slots=True)
class Cursor:
    """Where the scan of one input stands: the block being read, its offset in the stream and
    the lines counted in it so far (the state the scan methods share, instead of passing it
    along)."""

    scan: FileScan
    block: bytes = b""
    base: int = 0  # offset of the block in the (decompressed) stream
    line_no: int = 1  # number of the line starting at `counted`
    counted: int = 0  # offset in the block up to which lines are counted
    block_line: int = 1  # number of the block's first line
    starts: list[int] | None = None  # raw line starts, when the paste-shape layer changed it
    busy: bool = False  # whether the block went dense (read every line through shapes)
    shapeless: int = 0  # blocks still to read line by line (their shapes did not repeat)
    newlines: Any = None  # the offsets of the block's newlines (numpy), when it is unchanged

    def enter(self, block: bytes, starts: list[int] | None) -> None:
        """Start reading `block` (the cursor is at the line after the last block's)."""
        self.block = block
        self.starts = starts
        self.counted = 0
        self.block_line = self.line_no

    def count_to(self, at: int) -> int:
        """Count the lines up to offset `at` of the block (a line start); its number."""
        self.line_no += self.block.count(b"\n", self.counted, at)
        self.counted = at
        return self.line_no

    def offset_of(self, line_start: int) -> int:
        """The offset in the stream of the line at `line_start`, counted (count_to)."""
        if self.starts is None:
            return self.base + line_start
        return self.base + self.starts[self.line_no - self.block_line]


# --- the compiled rule set ------------------------------------------------------------------------


def thin_series(runs: list[RuleRun], budget: int) -> None:
    """Thin the longest series until all of them together hold at most `budget` points (series
    shared by several rules are counted once); a series that cannot be thinned further is left
    as it is."""
    buffers = {
        id(buffer): buffer
        for run in runs
        for per_rank in run.series.values()
        for buffer in per_rank.values()
    }
    total = sum(buffer.count for buffer in buffers.values())
    stuck: set[int] = set()
    while total > budget:
        open_ = [b for key, b in buffers.items() if key not in stuck]
        if not open_:
            return
        longest = max(open_, key=lambda buffer: buffer.count)
        dropped = longest.thin()
        if not dropped:
            stuck.add(id(longest))
        total -= dropped
