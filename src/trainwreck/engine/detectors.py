"""Detectors over per-rank series, in numpy, with robust statistics (median and MAD).

Each detector takes the series of every rank and its settings and returns a `DetectorResult`:
whether it fired, its outputs (usable in conditions as `name.output`), the ranks involved, and
point events (for cooccur and for evidence).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwreck.rules import registry as reg

RankKey = Any  # int rank, a str label ("node-2"), or None when unknown


@dataclass
class Points:
    """The points of one rank's series (all arrays the same length)."""

    value: np.ndarray
    index: np.ndarray
    t: np.ndarray
    file: np.ndarray
    line: np.ndarray
    offset: np.ndarray  # byte offset of the line in its (decompressed) file
    # Whether each point belongs to the series' regular sample: all do, unless the series was
    # thinned to stay within memory (state.SeriesBuffer); baselines are taken from the sample.
    sample: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.value.shape[0])

    def select(self, keep: Any) -> Points:
        """The points picked by a boolean mask or a slice."""
        return Points(
            self.value[keep],
            self.index[keep],
            self.t[keep],
            self.file[keep],
            self.line[keep],
            self.offset[keep],
            None if self.sample is None else self.sample[keep],
        )

    def sampled(self) -> Points:
        """The sample's points (all of them, unless the series was thinned)."""
        if self.sample is None or self.sample.all():
            return self
        return self.select(self.sample)

    def baseline(self) -> np.ndarray:
        """The values a baseline (median, spread, trend) is taken from: the sample's."""
        if self.sample is None or self.sample.all():
            return self.value
        return self.value[self.sample]

    def event(self, i: int, rank: RankKey) -> Event:
        return Event(
            rank,
            float(self.index[i]),
            float(self.t[i]),
            int(self.file[i]),
            int(self.line[i]),
            float(self.value[i]),
            int(self.offset[i]),
        )


@dataclass(slots=True)
class Event:
    """A point event: a detector's (a stall, a jump), or a matched line that an event detector
    (cooccur) reads, whose `index` is the line's step and `value` NaN."""

    rank: RankKey
    index: float  # the point's index (step) in its series
    t: float  # Unix time of its line (NaN without a timestamp)
    file: int  # the input's position in the scan
    line: int
    value: float = math.nan
    offset: int = -1  # byte offset of its line in its (decompressed) input


@dataclass
class DetectorResult:
    fired: bool
    outputs: dict[str, float] = field(default_factory=dict)
    ranks: list[RankKey] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    rank: RankKey = None  # the rank this detector names (drift, rank_outlier, threshold)
    note: str = ""  # a one-line human summary


def _finite(points: Points) -> Points:
    keep = np.isfinite(points.value)
    return points if keep.all() else points.select(keep)


def robust(values: np.ndarray) -> tuple[float, float]:
    """Median and median absolute deviation."""
    if values.size == 0:
        return math.nan, math.nan
    median = float(np.median(values))
    return median, float(np.median(np.abs(values - median)))


def periodic_stalls(
    series: Mapping[RankKey, Points], settings: reg.PeriodicStalls
) -> DetectorResult:
    min_ratio = float(settings.min_ratio)
    min_mad = float(settings.min_mad)
    # An absolute floor: on very flat series scheduler jitter passes the relative tests.
    min_excess = float(settings.min_excess)
    tolerance = float(settings.step_tolerance)
    analysed: list[RankKey] = []
    medians: list[float] = []
    mads: list[float] = []
    # The spikes of every rank, rank by rank in point order, as columns (a long run has tens of
    # thousands: no object per spike).
    parts: list[tuple[int, Points, np.ndarray]] = []
    warmup = int(settings.warmup)
    for rank, raw in series.items():
        points = _finite(raw)
        if len(points) < int(settings.min_points):
            continue
        if warmup:  # first steps pay for compilation, caches, allocator growth: not stalls
            points = points.select(slice(min(warmup, len(points) - 3), None))
        median, mad = robust(points.baseline())
        if not median > 0:
            continue
        mask = (
            (points.value >= min_ratio * median)
            & (points.value >= median + min_mad * mad)
            & (points.value >= median + min_excess)
        )
        if mad == 0:
            mask &= points.value > median
        rank_id = len(analysed)
        analysed.append(rank)
        medians.append(median)
        mads.append(mad)
        where = np.flatnonzero(mask)
        if where.size:
            parts.append((rank_id, points, where))
    outputs: dict[str, float] = {
        "count": 0.0,
        "ratio": math.nan,
        "median": float(np.median(medians)) if medians else math.nan,
        "mad": float(np.median(mads)) if mads else math.nan,
        "spike": math.nan,
        "interval": math.nan,
        "interval_s": math.nan,
        "interval_cv": math.nan,
        "ranks": float(len(analysed)),
    }
    if not analysed or not parts:
        return DetectorResult(False, outputs, analysed)
    aligned = settings.aligned_ranks
    need = (
        len(analysed)
        if aligned == "all"
        else 1
        if aligned == "any"
        else min(int(aligned), len(analysed))
    )
    spike_rank = np.concatenate([np.full(len(where), r) for r, _, where in parts])
    index, t, value = (
        np.concatenate([getattr(p, name)[where] for _, p, where in parts]).astype(np.float64)
        for name in ("index", "t", "value")
    )
    # Spikes by index (stable: ties keep rank order). NaN has no place in an order: the order
    # sorted() gives them, as the spikes were ordered one by one.
    if np.isnan(index).any():
        order = np.array(sorted(range(len(index)), key=index.tolist().__getitem__), dtype=np.intp)
    else:
        order = np.argsort(index, kind="stable")
    # Cluster spikes whose indices lie within the tolerance of the previous one: one stall.
    ordered = index[order]
    opens = np.ones(len(order), dtype=bool)
    opens[1:] = ~(np.diff(ordered) <= tolerance)
    cluster = np.cumsum(opens) - 1
    clusters = int(cluster[-1]) + 1
    pairs = np.unique(cluster * len(analysed) + spike_rank[order])
    aligned_ranks = np.bincount(pairs // len(analysed), minlength=clusters)
    stalls = np.flatnonzero(aligned_ranks >= need)
    member = (aligned_ranks >= need)[cluster]
    events: list[Event] = []
    if len(stalls):
        # each stall's event: its first spike of the greatest value (values are finite)
        values = value[order]
        greatest = np.maximum.reduceat(values, np.flatnonzero(opens))
        tops = np.flatnonzero(values == greatest[cluster])
        tops = tops[np.r_[True, cluster[tops][1:] != cluster[tops][:-1]]][stalls]
        picked = order[tops]
        ranks = spike_rank[picked].tolist()
        for r, i, when, f, line, v, offset in zip(
            ranks,
            index[picked].tolist(),
            t[picked].tolist(),
            np.concatenate([p.file[where] for _, p, where in parts])[picked].tolist(),
            np.concatenate([p.line[where] for _, p, where in parts])[picked].tolist(),
            value[picked].tolist(),
            np.concatenate([p.offset[where] for _, p, where in parts])[picked].tolist(),
            strict=True,
        ):
            events.append(Event(analysed[r], i, when, int(f), int(line), v, int(offset)))
    stall_index = _segment_medians(ordered, cluster, clusters)[stalls]
    times = t[order]
    timed = np.isfinite(times)
    stall_time = _segment_medians(times[timed], cluster[timed], clusters)[stalls]
    outputs["count"] = float(len(stalls))
    if len(stalls):
        outputs["spike"] = float(np.median(value[order][member]))
        outputs["ratio"] = outputs["spike"] / outputs["median"]
    fired = False
    if len(stalls) >= 2:
        intervals = np.diff(stall_index)
        mean = float(intervals.mean())
        outputs["interval"] = float(np.median(intervals))
        outputs["interval_cv"] = float(intervals.std() / mean) if mean > 0 else math.inf
        if np.isfinite(stall_time).sum() >= 2:
            outputs["interval_s"] = float(np.median(np.diff(stall_time[np.isfinite(stall_time)])))
    if len(stalls) >= int(settings.min_count):
        fired = outputs["interval_cv"] <= float(settings.max_interval_cv)
    note = ""
    if len(stalls):
        note = (
            f"{len(stalls)} stalls aligned on {need} of {len(analysed)} rank(s), "
            f"median spike {outputs['spike']:.1f} vs median {outputs['median']:.1f} "
            f"({outputs['ratio']:.2f}x), every {outputs['interval']:.0f} steps, interval CV {outputs['interval_cv']:.2f}"
        )
    return DetectorResult(fired, outputs, analysed, events, note=note)


def _segment_medians(values: np.ndarray, segments: np.ndarray, count: int) -> np.ndarray:
    """float(np.median(...)) of the values of each segment (ids 0 .. count - 1; NaN where a
    segment has none), for many segments at once: the middle of each segment sorted, or the
    mean of its two middle values, as np.median takes them. np.median's partition may put a
    -0.0 where a sort puts 0.0 (they are equal), so a segment holding a zero is taken by
    np.median itself, on its values in their order here. A NaN must be alone in its segment
    (periodic_stalls' clusters: a NaN index is never within the tolerance of another)."""
    out = np.full(count, np.nan)
    if not len(values):
        return out
    sizes = np.bincount(segments, minlength=count)
    ordered = values[np.lexsort((values, segments))]
    starts = np.cumsum(sizes) - sizes
    full = np.flatnonzero(sizes)
    low = ordered[starts[full] + (sizes[full] - 1) // 2]
    high = ordered[starts[full] + sizes[full] // 2]
    with np.errstate(over="ignore", invalid="ignore"):
        out[full] = np.where(sizes[full] % 2 == 1, low, (low + high) / 2)
    for segment in np.unique(segments[values == 0]).tolist():
        out[segment] = float(np.median(values[segments == segment]))
    return out


def drift(series: Mapping[RankKey, Points], settings: reg.Drift) -> DetectorResult:
    increases: dict[RankKey, tuple[float, float, Points]] = {}
    for rank, raw in series.items():
        points = _finite(raw)
        if len(points) < int(settings.min_points):
            continue
        values = points.baseline()
        third = max(len(values) // 3, 1)
        early = float(np.median(values[:third]))
        late = float(np.median(values[-third:]))
        delta = late - early
        increase = delta / early if early > 0 else math.inf if delta > 0 else 0.0
        increases[rank] = (increase, delta, points)
    min_increase = float(settings.min_increase)
    drifting = [
        rank
        for rank, (increase, delta, _) in increases.items()
        if increase >= min_increase and delta >= float(settings.min_delta)
    ]
    if settings.peers:
        drifting = [
            rank
            for rank in drifting
            if len(increases) >= 2
            and all(increases[other][0] < min_increase / 2 for other in increases if other != rank)
        ]
    outputs = {
        "count": float(len(drifting)),
        "increase": math.nan,
        "delta": math.nan,
        "rank": math.nan,
    }
    if not drifting:
        return DetectorResult(False, outputs, list(increases))
    worst = max(drifting, key=lambda r: increases[r][0])
    increase, delta, points = increases[worst]
    outputs.update(
        increase=increase, delta=delta, rank=float(worst) if isinstance(worst, int) else math.nan
    )
    last = len(points) - 1
    events = [points.event(0, worst), points.event(last, worst)]
    shown = "from 0" if not math.isfinite(increase) else f"+{increase * 100:.0f}%"
    note = (
        f"rank {worst} rose {shown} (by {delta:.1f}) from the first third of the run to the last; peers stayed flat"
        if settings.peers
        else f"rank {worst} rose {shown} (by {delta:.1f})"
    )
    return DetectorResult(True, outputs, drifting, events, rank=worst, note=note)


def rank_outlier(series: Mapping[RankKey, Points], settings: reg.RankOutlier) -> DetectorResult:
    medians: dict[RankKey, float] = {}
    last: dict[RankKey, Points] = {}
    for rank, raw in series.items():
        points = _finite(raw)
        if len(points):
            medians[rank] = float(np.median(points.baseline()))
            last[rank] = points
    outputs = {"count": 0.0, "rank": math.nan, "ratio": math.nan}
    if len(medians) < 3:
        return DetectorResult(False, outputs, list(medians))
    values = np.asarray(list(medians.values()))
    center, mad = robust(values)
    spread = max(mad, 0.01 * abs(center))
    below = bool(settings.below)
    outliers = []
    for rank, median in medians.items():
        if below:
            hit = median <= center - float(settings.min_mad) * spread and (
                center == 0 or median <= center / float(settings.min_ratio)
            )
        else:
            hit = (
                median >= center + float(settings.min_mad) * spread
                and median >= float(settings.min_ratio) * center
            )
        if hit:
            outliers.append(rank)
    if not outliers:
        return DetectorResult(False, outputs, list(medians))
    worst = (min if below else max)(outliers, key=lambda r: medians[r])
    ratio = medians[worst] / center if center else math.inf
    outputs.update(
        count=float(len(outliers)),
        rank=float(worst) if isinstance(worst, int) else math.nan,
        ratio=ratio,
    )
    points = last[worst]
    i = len(points) - 1
    events = [points.event(i, worst)]
    note = (
        f"rank {worst} median {medians[worst]:.1f} is {ratio:.2f}x the ranks' median {center:.1f}"
    )
    return DetectorResult(True, outputs, outliers, events, rank=worst, note=note)


def threshold(series: Mapping[RankKey, Points], settings: reg.Threshold) -> DetectorResult:
    events: list[Event] = []
    ranks: list[RankKey] = []
    count = 0
    top, bottom = -math.inf, math.inf
    first: tuple[float, RankKey] | None = None
    for rank, raw in series.items():
        points = _finite(raw)
        if not len(points):
            continue
        if settings.above is not None:
            mask = points.value > float(settings.above)
        else:
            mask = points.value < float(settings.below)  # type: ignore[arg-type]
        hits = np.flatnonzero(mask)
        if not hits.size:
            continue
        ranks.append(rank)
        count += int(hits.size)
        top = max(top, float(points.value[hits].max()))
        bottom = min(bottom, float(points.value[hits].min()))
        key = (
            float(points.t[hits[0]])
            if math.isfinite(points.t[hits[0]])
            else float(points.index[hits[0]])
        )
        if first is None or key < first[0]:
            first = (key, rank)
        for i in hits[:50]:
            events.append(points.event(int(i), rank))
    fired = count >= int(settings.min_count)
    rank = first[1] if first else None
    outputs = {
        "count": float(count),
        "max": top if count else math.nan,
        "min": bottom if count else math.nan,
        "rank": float(rank) if isinstance(rank, int) else math.nan,
    }
    return DetectorResult(
        fired, outputs, ranks, events, rank=rank, note=f"{count} point(s) beyond the threshold"
    )


@dataclass
class EventTable:
    """Point events of a part, as arrays (for cooccur)."""

    rank: list[RankKey]
    t: np.ndarray
    step: np.ndarray
    file: np.ndarray
    line: np.ndarray
    offset: np.ndarray

    def __len__(self) -> int:
        return len(self.rank)


def events_table(events: list[Event]) -> EventTable:
    return EventTable(
        [e.rank for e in events],
        np.asarray([e.t for e in events], dtype=float),
        np.asarray([e.index for e in events], dtype=float),
        np.asarray([e.file for e in events], dtype=np.int64),
        np.asarray([e.line for e in events], dtype=np.int64),
        np.asarray([e.offset for e in events], dtype=np.int64),
    )


def cooccur(
    a: EventTable, b: EventTable, settings: reg.Cooccur
) -> tuple[DetectorResult, np.ndarray]:
    """Which a-events have a b-event within the window. Returns the result and the hit mask."""
    window = float(settings.window)
    by = settings.by
    hits = np.zeros(len(a), dtype=bool)
    if len(a) and len(b):
        if by == "time":
            key_a, key_b = a.t, b.t
        elif by == "step":
            key_a, key_b = a.step, b.step
        else:
            key_a, key_b = a.line.astype(float), b.line.astype(float)
        groups_b: dict[Any, np.ndarray] = {}
        same_rank = bool(settings.same_rank)
        for i in range(len(a)):
            if not math.isfinite(key_a[i]):
                continue
            group = (a.rank[i] if same_rank else None, int(a.file[i]) if by == "line" else None)
            keys = groups_b.get(group)
            if keys is None:
                select = np.isfinite(key_b)
                if same_rank:
                    select &= np.asarray([r == group[0] for r in b.rank], dtype=bool)
                if by == "line":
                    select &= b.file == group[1]
                keys = np.sort(key_b[select])
                groups_b[group] = keys
            if keys.size:
                j = int(np.searchsorted(keys, key_a[i]))
                near = min(
                    (abs(keys[k] - key_a[i]) for k in (j - 1, j) if 0 <= k < keys.size),
                    default=math.inf,
                )
                hits[i] = near <= window
    count = int(hits.sum())
    fraction = count / len(a) if len(a) else 0.0
    fired = count >= int(settings.min_count) and fraction >= float(settings.min_fraction)
    ranks = sorted({a.rank[i] for i in np.flatnonzero(hits)}, key=_rank_sort)
    note = f"{count} of {len(a)} '{settings.a}' events have a '{settings.b}' event within {window:g} ({by})"
    return DetectorResult(
        fired, {"count": float(count), "fraction": fraction}, ranks, note=note
    ), hits


def _rank_sort(rank: RankKey) -> tuple[int, Any]:
    if isinstance(rank, int):
        return (0, rank)
    return (1, str(rank))


rank_sort_key = _rank_sort


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.shape[0], dtype=float)
    ranks[order] = np.arange(values.shape[0], dtype=float)
    return ranks


def correlation(
    series: Mapping[RankKey, Points], other: Mapping[RankKey, Points], settings: reg.Correlation
) -> DetectorResult:
    """Spearman rank correlation between two series, point by point on the same rank and index
    (e.g. step time against tokens per step: a workload that explains the step time). The median
    over ranks must reach min_r. Outputs: r, count (points paired)."""
    coefficients: list[float] = []
    paired = 0
    ranks: list[RankKey] = []
    for rank, raw in series.items():
        if rank not in other:
            continue
        a, b = _finite(raw).sampled(), _finite(other[rank]).sampled()
        if not len(a) or not len(b):
            continue
        common, ia, ib = np.intersect1d(a.index, b.index, return_indices=True)
        if common.size < int(settings.min_points):
            continue
        x, y = a.value[ia], b.value[ib]
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue  # a constant workload explains nothing
        rx, ry = _ranks(x), _ranks(y)
        r = float(np.corrcoef(rx, ry)[0, 1])
        if math.isfinite(r):
            coefficients.append(r)
            paired += int(common.size)
            ranks.append(rank)
    outputs = {
        "r": float(np.median(coefficients)) if coefficients else math.nan,
        "count": float(paired),
    }
    fired = bool(coefficients) and outputs["r"] >= float(settings.min_r)
    note = (
        f"'{settings.series}' follows '{settings.with_}' (Spearman r {outputs['r']:.2f} over {paired} points)"
        if coefficients
        else ""
    )
    return DetectorResult(fired, outputs, ranks, note=note)


def jump(series: Mapping[RankKey, Points], settings: reg.Jump) -> DetectorResult:
    """Sudden changes against the recent past: each point against the median of the `window`
    points before it (after at least `min_history` of them). A point jumps up when it is at least
    `min_ratio` x that median (and `min_delta` above it), down when it is at most the median /
    `min_ratio`. Series are read in the order their points were logged, so a step counter that
    restarts after a resume still compares each value with the values logged just before it."""
    direction = str(settings.direction)
    ratio_min = float(settings.min_ratio)
    min_delta = float(settings.min_delta)
    window = int(settings.window)
    history = int(settings.min_history)
    events: list[Event] = []
    ranks: list[RankKey] = []
    count = 0
    largest = math.nan
    first: tuple[float, RankKey, float] | None = None
    for rank, raw in series.items():
        if len(raw) <= history:
            continue  # no point has `min_history` points before it
        points = _finite(raw)
        values = points.value
        base = _trailing_median(
            values, window, history, _may_jump(values, window, direction, ratio_min, min_delta)
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            factor_up = values / base
            factor_down = np.where(values > 0, base / values, np.inf)
        valid = (base > 0) & (values >= 0)  # ratios need positive baselines (loss, lr, grad norm)
        up = valid & (factor_up >= ratio_min) & (values - base >= min_delta)
        down = valid & (factor_down >= ratio_min) & (base - values >= min_delta)
        mask = up if direction == "up" else down if direction == "down" else up | down
        hits = [int(i) for i in np.flatnonzero(mask)]
        factors = [float(factor_up[i] if up[i] else factor_down[i]) for i in hits[:1000]]
        if not hits:
            continue
        ranks.append(rank)
        count += len(hits)
        top = max(factors)
        largest = top if not math.isfinite(largest) else max(largest, top)
        key = float(points.t[hits[0]]) if math.isfinite(points.t[hits[0]]) else float(hits[0])
        if first is None or key < first[0]:
            first = (key, rank, float(points.index[hits[0]]))
        for i in hits[:50]:
            events.append(points.event(i, rank))
    fired = count >= int(settings.min_count)
    rank = first[1] if first else None
    outputs = {
        "count": float(count),
        "ratio": largest,
        "index": first[2] if first else math.nan,
        "rank": float(rank) if isinstance(rank, int) else math.nan,
    }
    note = (
        f"{count} sudden change(s) of {direction} >= {ratio_min:g}x against the previous {window} points"
        f" (largest {largest:.3g}x, first at index {outputs['index']:g})"
        if count
        else ""
    )
    return DetectorResult(fired, outputs, ranks, events, rank=rank, note=note)


def _may_jump(
    values: np.ndarray, window: int, direction: str, ratio_min: float, min_delta: float
) -> np.ndarray | None:
    """The points whose trailing median could make them a jump (None: all of them).

    A median lies between the least and the greatest of its window, and each test of `jump` is
    monotone in the baseline (x / b and x - b fall as b grows, b / x and b - x rise), so a point
    that fails its test against the bound that favours it fails against its median too. The
    bounds cost a few vectorised passes; the median, a partition per window, is then taken only
    where a jump is possible (a few points in a hundred on a healthy run)."""
    n = int(values.shape[0])
    if window < 1 or n < 2 or values.dtype.kind != "f":
        return None
    low = np.full(n, np.nan)
    high = np.full(n, np.nan)
    head = min(window, n)  # points 1 .. head-1 have fewer than `window` values before them
    low[1:head] = np.minimum.accumulate(values[: head - 1])
    high[1:head] = np.maximum.accumulate(values[: head - 1])
    if n > window:
        rows = n - window  # point window + j reads values[j : j + window]
        low_rows, high_rows = low[window:], high[window:]  # views: filled in place
        low_rows[:] = high_rows[:] = values[:rows]
        for k in range(1, window):
            np.minimum(low_rows, values[k : k + rows], out=low_rows)
            np.maximum(high_rows, values[k : k + rows], out=high_rows)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        possible = np.zeros(n, dtype=bool)
        if direction != "down":  # up: the least baseline favours it; none > 0 may still be
            possible |= (low <= 0) | ((values / low >= ratio_min) & (values - low >= min_delta))
        if direction != "up":
            factor = np.where(values > 0, high / values, np.inf)  # as jump takes it
            possible |= (high > 0) & (factor >= ratio_min) & (high - values >= min_delta)
            # Two middle values near the float maximum average to inf, above the greatest.
            possible |= high > np.finfo(values.dtype).max / 2
    return possible & (values >= 0)


def _trailing_median(
    values: np.ndarray, window: int, history: int, need: np.ndarray | None = None
) -> np.ndarray:
    """Median of the up to `window` values before each point (NaN before `history` of them),
    computed in chunks so memory stays bounded on long series. With `need` (a mask), only at
    the points it picks; NaN elsewhere."""
    n = int(values.shape[0])
    base = np.full(n, np.nan)
    for i in range(history, min(window, n)):
        if need is None or need[i]:
            base[i] = float(np.median(values[:i]))
    if n > window:
        view = np.lib.stride_tricks.sliding_window_view(
            values[:-1], window
        )  # row j: values[j:j+window]
        chunk = 65536
        if need is None:
            for start in range(0, view.shape[0], chunk):
                base[window + start : window + start + chunk] = np.median(
                    view[start : start + chunk], axis=1
                )
        else:
            rows = np.flatnonzero(need[window:])
            for start in range(0, rows.size, chunk):
                picked = rows[start : start + chunk]
                base[window + picked] = np.median(view[picked], axis=1)
    return base


# The function of every kind of detector in rules/registry.py (tests/test_rules_registry.py keeps
# the two tables alike). SERIES kinds take (series, settings), SERIES_PAIR kinds (series, other,
# settings), EVENTS kinds (table_a, table_b, settings) and also return the hit mask of table_a.
FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "periodic_stalls": periodic_stalls,
    "drift": drift,
    "rank_outlier": rank_outlier,
    "threshold": threshold,
    "cooccur": cooccur,
    "correlation": correlation,
    "jump": jump,
}
