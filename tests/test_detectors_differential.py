"""The fast paths of the detectors against the straightforward computation they replace.

`jump` takes its trailing medians only where a bound says a jump is possible (detectors._may_jump);
these tests run it both ways, and against the per-window median it used to take everywhere, on
random series with NaN and inf, ties, zeros, negative values, huge values and short series, and
require the same result, field by field. `periodic_stalls` clusters its spikes as columns (one
sort, medians of all clusters at once); it is run against the spike-by-spike version it replaces
(reference_stalls, below) on random series and settings, with NaN and infinite steps, ties,
zeros of both signs and stalls on some ranks only.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainwreck.engine import detectors as det
from trainwreck.rules.registry import DETECTORS


def reference_median(values: np.ndarray, window: int, history: int) -> np.ndarray:
    """The trailing median as it was taken before the bounds: every window, partitioned."""
    n = int(values.shape[0])
    base = np.full(n, np.nan)
    for i in range(history, min(window, n)):
        base[i] = float(np.median(values[:i]))
    if n > window:
        view = np.lib.stride_tricks.sliding_window_view(values[:-1], window)
        base[window:] = np.median(view, axis=1)
    return base


def points(values: np.ndarray, rng: np.random.Generator) -> det.Points:
    n = values.shape[0]
    t = np.cumsum(rng.uniform(0.5, 1.5, n))
    t[rng.random(n) < 0.1] = math.nan
    return det.Points(
        values,
        np.arange(n, dtype=float),
        t,
        np.zeros(n, dtype=np.int64),
        np.arange(1, n + 1, dtype=np.int64),
        np.arange(n, dtype=np.int64) * 80,
    )


def random_series(rng: np.random.Generator) -> np.ndarray:
    """A series of one of several characters, with spikes, drops and non-finite values."""
    n = int(rng.choice([0, 1, 2, 3, 5, 8, 13, 21, 40, 200, 1500]))
    kind = rng.integers(0, 6)
    if kind == 0:  # a noisy level with spikes and drops (step times, grad norms)
        values = 100 * (1 + rng.normal(0, 0.05, n))
        values[rng.random(n) < 0.03] *= rng.uniform(1.5, 20)
        values[rng.random(n) < 0.03] /= rng.uniform(1.5, 20)
    elif kind == 1:  # few distinct values: ties everywhere (a learning rate, rounded losses)
        values = rng.choice([0.0, 1e-4, 1e-3, 5e-3, 1.0], n)
    elif kind == 2:  # a falling loss with resumes that reset it
        values = np.exp(-np.linspace(0, 3, n)) * 4 + rng.normal(0, 0.02, n)
        values[rng.random(n) < 0.01] = 9.0
    elif kind == 3:  # around zero, signed (a baseline <= 0 is no baseline)
        values = rng.normal(0, 1, n)
    elif kind == 4:  # huge magnitudes: two middle values that overflow when averaged
        values = rng.choice([1.7e308, 1.6e308, 1.0, 0.0, -0.0, 1e-300], n)
    else:  # integers as floats, with exact ties of the window's bounds
        values = rng.integers(0, 4, n).astype(float)
    values = values.astype(float)
    values[rng.random(n) < 0.05] = math.nan
    values[rng.random(n) < 0.02] = math.inf
    values[rng.random(n) < 0.01] = -math.inf
    return values


def same(a: det.DetectorResult, b: det.DetectorResult) -> None:
    assert a.fired == b.fired
    assert a.outputs.keys() == b.outputs.keys()
    for key in a.outputs:
        x, y = a.outputs[key], b.outputs[key]
        assert (math.isnan(x) and math.isnan(y)) or x == y, key
    assert a.ranks == b.ranks and a.rank == b.rank and a.note == b.note
    assert len(a.events) == len(b.events)
    for e, f in zip(a.events, b.events, strict=True):
        assert (e.rank, e.index, e.file, e.line) == (f.rank, f.index, f.file, f.line)
        assert e.offset == f.offset
        assert e.value == f.value or (math.isnan(e.value) and math.isnan(f.value))
        assert e.t == f.t or (math.isnan(e.t) and math.isnan(f.t))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference warns on empty windows
@pytest.mark.parametrize("seed", range(40))
def test_jump_with_bounds_equals_jump_with_every_median(seed: int, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    series = {rank: points(random_series(rng), rng) for rank in range(int(rng.integers(1, 4)))}
    for _ in range(6):
        config = {
            "series": "s",
            "direction": str(rng.choice(["up", "down", "both"])),
            "min_ratio": float(rng.choice([0.5, 1.0, 1.3, 1.5, 2.0, 5.0, 20.0])),
            "min_delta": float(rng.choice([0.0, 0.0, 0.01, 1.0, 50.0, -1.0])),
            "window": int(rng.choice([1, 2, 3, 5, 10, 20, 25])),
            "min_history": int(rng.choice([0, 1, 3, 5, 10, 30])),
        }
        settings = DETECTORS["jump"].settings(config)
        fast = det.jump(series, settings)
        with monkeypatch.context() as patched:
            patched.setattr(det, "_may_jump", lambda *args: None)
            full = det.jump(series, settings)
            patched.setattr(
                det, "_trailing_median", lambda v, w, h, need: reference_median(v, w, h)
            )
            before = det.jump(series, settings)
        same(fast, full)
        same(fast, before)


@pytest.mark.parametrize("seed", range(20))
def test_bounded_medians_equal_every_median_where_a_jump_is_possible(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    values = random_series(rng)
    values = values[np.isfinite(values)]
    window, history = int(rng.integers(1, 25)), int(rng.integers(0, 12))
    for direction in ("up", "down", "both"):
        need = det._may_jump(values, window, direction, 1.5, 0.0)
        expected = reference_median(values, window, history)
        got = det._trailing_median(values, window, history, need)
        where = np.ones(values.shape[0], dtype=bool) if need is None else need
        assert np.array_equal(got[where], expected[where], equal_nan=True)
        assert np.isnan(got[~where]).all()


def test_bounds_skip_most_medians_on_a_healthy_run() -> None:
    rng = np.random.default_rng(7)
    values = 500 * (1 + rng.normal(0, 0.02, 10_000))
    values[::37] += 400  # a stall every 37 steps
    need = det._may_jump(values, 10, "up", 1.5, 50.0)
    assert need is not None
    assert need[::37][1:].all()  # every stall is judged against its median
    assert need.sum() < 0.05 * values.shape[0]


# -- periodic_stalls -------------------------------------------------------------------------------


def reference_stalls(series: dict, settings) -> det.DetectorResult:
    """periodic_stalls as it was before its spikes became columns: one Event per spike, one
    np.median per stall."""
    min_ratio = float(settings.min_ratio)
    min_mad = float(settings.min_mad)
    # An absolute floor: on very flat series scheduler jitter passes the relative tests.
    min_excess = float(settings.min_excess)
    tolerance = float(settings.step_tolerance)
    analysed: list = []
    medians: list[float] = []
    mads: list[float] = []
    spike_rank: list[int] = []  # position in `analysed` of each spike's rank
    spikes: list = []
    warmup = int(settings.warmup)
    for rank, raw in series.items():
        points = det._finite(raw)
        if len(points) < int(settings.min_points):
            continue
        if warmup:  # first steps pay for compilation, caches, allocator growth: not stalls
            points = points.select(slice(min(warmup, len(points) - 3), None))
        median, mad = det.robust(points.baseline())
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
        for i in np.flatnonzero(mask):
            spike_rank.append(rank_id)
            spikes.append(points.event(int(i), rank))
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
    if not analysed or not spikes:
        return det.DetectorResult(False, outputs, analysed)
    aligned = settings.aligned_ranks
    need = (
        len(analysed)
        if aligned == "all"
        else 1
        if aligned == "any"
        else min(int(aligned), len(analysed))
    )
    order = sorted(range(len(spikes)), key=lambda k: spikes[k].index)
    # Cluster spikes whose indices lie within the tolerance of the previous one: one stall.
    clusters: list[list[int]] = []
    for k in order:
        if clusters and spikes[k].index - spikes[clusters[-1][-1]].index <= tolerance:
            clusters[-1].append(k)
        else:
            clusters.append([k])
    stalls: list[list[int]] = [c for c in clusters if len({spike_rank[k] for k in c}) >= need]
    events: list = []
    stall_index: list[float] = []
    stall_time: list[float] = []
    spike_values: list[float] = []
    for cluster in stalls:
        events.append(max((spikes[k] for k in cluster), key=lambda e: e.value))
        stall_index.append(float(np.median([spikes[k].index for k in cluster])))
        times = [spikes[k].t for k in cluster if math.isfinite(spikes[k].t)]
        stall_time.append(float(np.median(times)) if times else math.nan)
        spike_values.extend(spikes[k].value for k in cluster)
    outputs["count"] = float(len(stalls))
    if spike_values:
        outputs["spike"] = float(np.median(spike_values))
        outputs["ratio"] = outputs["spike"] / outputs["median"]
    fired = False
    if len(stalls) >= 2:
        intervals = np.diff(np.asarray(stall_index))
        mean = float(intervals.mean())
        outputs["interval"] = float(np.median(intervals))
        outputs["interval_cv"] = float(intervals.std() / mean) if mean > 0 else math.inf
        times = np.asarray(stall_time)
        if np.isfinite(times).sum() >= 2:
            outputs["interval_s"] = float(np.median(np.diff(times[np.isfinite(times)])))
    if len(stalls) >= int(settings.min_count):
        fired = outputs["interval_cv"] <= float(settings.max_interval_cv)
    note = ""
    if stalls:
        note = (
            f"{len(stalls)} stalls aligned on {need} of {len(analysed)} rank(s), "
            f"median spike {outputs['spike']:.1f} vs median {outputs['median']:.1f} "
            f"({outputs['ratio']:.2f}x), every {outputs['interval']:.0f} steps, interval CV {outputs['interval_cv']:.2f}"
        )
    return det.DetectorResult(fired, outputs, analysed, events, note=note)


def stall_points(rng: np.random.Generator, n: int) -> det.Points:
    """A step-time series with stalls, on steps that may repeat, jump, be NaN, inf or -0.0."""
    values = 500 * (1 + rng.normal(0, 0.02, n))
    period = int(rng.choice([3, 7, 37]))
    values[rng.integers(0, period) :: period] += float(rng.choice([0.0, 50.0, 400.0]))
    values[rng.random(n) < 0.05] *= rng.uniform(1.5, 4)
    if rng.random() < 0.3:
        values = np.round(values, -2)  # ties: stalls of equal value in one cluster
    values[rng.random(n) < 0.03] = math.nan
    kind = rng.integers(0, 4)
    index = np.arange(n, dtype=float)
    if kind == 1:  # steps logged twice, or in coarse units: many spikes within the tolerance
        index = np.floor(index / rng.integers(2, 4))
    elif kind == 2:  # steps that are not numbers, or not finite
        index[rng.random(n) < 0.05] = math.nan
        index[rng.random(n) < 0.02] = math.inf
        index[rng.random(n) < 0.02] = -math.inf
    elif kind == 3:  # around zero, both signs of it
        index = index - n // 2
        index[index == 0] = rng.choice([0.0, -0.0])
        index[rng.random(n) < 0.05] = -0.0
    t = 1.7e9 + np.cumsum(rng.uniform(0.5, 1.5, n))
    t[rng.random(n) < 0.1] = math.nan
    if rng.random() < 0.2:
        t[rng.random(n) < 0.3] = rng.choice([0.0, -0.0])
    return det.Points(
        values,
        index,
        t,
        rng.integers(0, 3, n),
        np.arange(1, n + 1, dtype=np.int64),
        np.arange(n, dtype=np.int64) * 80,
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("seed", range(60))
def test_periodic_stalls_equal_the_spike_by_spike_version(seed: int) -> None:
    rng = np.random.default_rng(5000 + seed)
    ranks = int(rng.integers(1, 6))
    n = int(rng.choice([5, 25, 60, 300, 2000]))
    series = {
        (rank if rng.random() < 0.8 else f"node-{rank}"): stall_points(rng, n)
        for rank in range(ranks)
    }
    if rng.random() < 0.3:  # stalls on some ranks only
        first = next(iter(series))
        series[first] = det.Points(
            np.full(n, 500.0),
            series[first].index,
            series[first].t,
            series[first].file,
            series[first].line,
            series[first].offset,
        )
    for _ in range(4):
        config = {
            "series": "s",
            "min_ratio": float(rng.choice([1.05, 1.2, 2.0])),
            "min_mad": float(rng.choice([0.0, 3.0, 6.0])),
            "min_excess": float(rng.choice([0.0, 50.0])),
            "aligned_ranks": rng.choice(["all", "any", 2, 3]).item(),
            "step_tolerance": int(rng.choice([0, 1, 2, 5])),
            "min_count": int(rng.choice([1, 3])),
            "min_points": int(rng.choice([3, 20])),
            "warmup": int(rng.choice([0, 3])),
        }
        settings = DETECTORS["periodic_stalls"].settings(config)
        same_bits(det.periodic_stalls(series, settings), reference_stalls(series, settings))


def same_number(x: float, y: float) -> bool:
    """Equal, both NaN, or both the same zero (a -0.0 would print differently)."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y and math.copysign(1, x) == math.copysign(1, y)


def same_bits(a: det.DetectorResult, b: det.DetectorResult) -> None:
    """`same`, with NaN steps and the sign of zeros compared too."""
    assert a.fired == b.fired and a.outputs.keys() == b.outputs.keys()
    for key in a.outputs:
        assert same_number(a.outputs[key], b.outputs[key]), key
    assert a.ranks == b.ranks and a.rank == b.rank and a.note == b.note
    assert len(a.events) == len(b.events)
    for e, f in zip(a.events, b.events, strict=True):
        assert (e.rank, e.file, e.line, e.offset) == (f.rank, f.file, f.line, f.offset)
        assert same_number(e.index, f.index) and same_number(e.t, f.t)
        assert same_number(e.value, f.value)


def test_periodic_stalls_on_a_long_run() -> None:
    """The benchmark's shape: 8 ranks, a stall every 37 steps on all of them."""
    rng = np.random.default_rng(11)
    series = {}
    for rank in range(8):
        values = 512 * (1 + rng.normal(0, 0.01, 20_000))
        values[36::37] += 400
        series[rank] = points(values, rng)
    settings = DETECTORS["periodic_stalls"].settings({"series": "s"})
    fast = det.periodic_stalls(series, settings)
    assert fast.fired and fast.outputs["count"] == len(range(36, 20_000, 37))
    same_bits(fast, reference_stalls(series, settings))


def test_periodic_stalls_ties_keep_the_first_rank() -> None:
    """Ranks whose stalls are equal in step and value: the stall's event is the first rank's,
    as the spike-by-spike version chose it (the sort of the spikes must be stable)."""
    rng = np.random.default_rng(3)
    values = np.round(512 * (1 + rng.normal(0, 0.01, 5_000)))
    values[36::37] += 400
    series = {rank: points(values.copy(), np.random.default_rng(rank)) for rank in range(8)}
    settings = DETECTORS["periodic_stalls"].settings({"series": "s"})
    fast = det.periodic_stalls(series, settings)
    assert fast.events and {event.rank for event in fast.events} == {0}
    same_bits(fast, reference_stalls(series, settings))


@pytest.mark.parametrize("seed", range(20))
def test_segment_medians_equal_np_median(seed: int) -> None:
    """Each segment's median as float(np.median(...)) of its values in their order, zeros of
    both signs, empty segments and NaN alone in its segment included."""
    rng = np.random.default_rng(9000 + seed)
    n = int(rng.integers(0, 400))
    count = int(rng.integers(1, 30))
    segments = np.sort(rng.integers(0, count, n))
    values = rng.choice([0.0, -0.0, 1.0, -1.0, 2.5, 1e308, 1.7e308, -math.inf], n)
    noisy = rng.random(n) < 0.3
    values[noisy] = rng.normal(0, 5, int(noisy.sum()))
    alone = count  # a NaN in a segment of its own
    segments = np.append(segments, alone)
    values = np.append(values, math.nan)
    got = det._segment_medians(values, segments, count + 2)
    for segment in range(count + 2):
        mine = values[segments == segment]
        expected = float(np.median(mine)) if len(mine) else math.nan
        with np.errstate(over="ignore", invalid="ignore"):
            assert same_number(float(got[segment]), expected), segment
