"""Each detector on synthetic numpy data: fires on the signal, stays silent on look-alikes."""

from __future__ import annotations

import math

import numpy as np

from trainwreck.engine import detectors as det
from trainwreck.rules.registry import DETECTORS

RNG = np.random.default_rng(1234)


def points(values, index=None, t=None, file_id=0) -> det.Points:
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    return det.Points(
        values,
        np.arange(n, dtype=float) if index is None else np.asarray(index, dtype=float),
        np.full(n, math.nan) if t is None else np.asarray(t, dtype=float),
        np.full(n, file_id, dtype=np.int64),
        np.arange(1, n + 1, dtype=np.int64),
        np.arange(n, dtype=np.int64) * 100,
    )


def settings(kind: str, **overrides):
    """The typed settings of a detector of `kind` (the registry's defaults, `overrides` over
    them; parameters the kind does not have, such as `series` for cooccur, are not read)."""
    return DETECTORS[kind].settings({"series": "s", **overrides})


def stalled_series(n=400, every=37, base=500.0, extra=300.0, noise=0.01, ranks=4, offset=20):
    stall_steps = list(range(offset, n, every))
    out = {}
    for rank in range(ranks):
        values = base * (1 + RNG.normal(0, noise, n))
        values[stall_steps] += extra
        out[rank] = points(values, t=np.cumsum(values) / 1000)
    return out, stall_steps


def test_periodic_stalls_fire_on_aligned_regular_spikes():
    series, steps = stalled_series()
    result = det.periodic_stalls(series, settings("periodic_stalls"))
    assert result.fired
    assert result.outputs["count"] == len(steps)
    assert result.outputs["interval"] == 37
    assert result.outputs["interval_cv"] < 0.05
    assert 1.5 < result.outputs["ratio"] < 1.7
    assert result.outputs["interval_s"] > 0
    assert [e.index for e in result.events] == steps


def test_a_small_stall_on_a_long_step_counts_by_mad():
    # 300 ms on a 1.5 s step is only 20%: the MAD criterion still sees it on a quiet series.
    series, _ = stalled_series(base=1500.0, extra=320.0, noise=0.005)
    assert det.periodic_stalls(series, settings("periodic_stalls")).fired


def test_min_excess_ignores_jitter_on_a_flat_series():
    # 10 ms steps with a regular 3.5 ms bump pass the relative tests; an absolute floor does not.
    series, _ = stalled_series(base=10.0, extra=3.5, noise=0.005, ranks=1)
    assert det.periodic_stalls(series, settings("periodic_stalls")).fired
    result = det.periodic_stalls(series, settings("periodic_stalls", min_excess=50))
    assert not result.fired
    assert result.outputs["count"] == 0


def test_one_slow_step_is_not_periodic():
    values = 500 * (1 + RNG.normal(0, 0.01, 400))
    values[200] += 3000  # a checkpoint save
    result = det.periodic_stalls(
        {0: points(values), 1: points(values)}, settings("periodic_stalls")
    )
    assert not result.fired
    assert result.outputs["count"] == 1


def test_noise_is_not_stalls():
    series = {r: points(500 * RNG.lognormal(0, 0.05, 600)) for r in range(4)}
    assert not det.periodic_stalls(series, settings("periodic_stalls")).fired


def test_unaligned_spikes_do_not_count_when_all_ranks_are_required():
    series, _ = stalled_series(ranks=2)
    # Move rank 1's spikes by 10 steps: no longer the same steps.
    shifted = series[1].value.copy()
    shifted = np.roll(shifted, 10)
    series[1] = points(shifted)
    assert not det.periodic_stalls(series, settings("periodic_stalls")).fired
    assert det.periodic_stalls(series, settings("periodic_stalls", aligned_ranks="any")).fired


def test_irregular_spikes_fail_the_interval_regularity():
    n = 600
    values = 500 * (1 + RNG.normal(0, 0.01, n))
    values[[30, 33, 300, 310, 590]] += 400
    result = det.periodic_stalls({0: points(values)}, settings("periodic_stalls"))
    assert result.outputs["count"] == 5
    assert result.outputs["interval_cv"] > 0.6
    assert not result.fired


def test_warmup_steps_are_ignored():
    values = 500 * (1 + RNG.normal(0, 0.01, 100))
    values[:3] = [9000, 4000, 2000]
    result = det.periodic_stalls({0: points(values)}, settings("periodic_stalls"))
    assert result.outputs["count"] == 0


def test_drift_finds_the_one_rank_that_slows():
    n = 300
    ramp = np.linspace(0, 0.3, n)
    series = {
        r: points(800 * (1 + RNG.normal(0, 0.01, n)) * (1 + (ramp if r == 2 else 0)))
        for r in range(4)
    }
    result = det.drift(series, settings("drift"))
    assert result.fired
    assert result.rank == 2
    assert result.outputs["count"] == 1
    assert 0.15 < result.outputs["increase"] < 0.3


def test_drift_on_every_rank_is_not_a_one_rank_drift():
    n = 300
    ramp = np.linspace(0, 0.3, n)
    series = {r: points(800 * (1 + ramp)) for r in range(4)}
    assert not det.drift(series, settings("drift")).fired
    assert det.drift(series, settings("drift", peers=False)).fired


def test_drift_from_zero_counts_as_infinite_rise():
    series = {0: points([0, 0, 0, 0, 2, 4, 8, 16, 30]), 1: points([0] * 9)}
    result = det.drift(
        series, settings("drift", min_increase=0.5, min_delta=3, peers=False, min_points=4)
    )
    assert result.fired and result.rank == 0
    assert math.isinf(result.outputs["increase"])


def test_rank_outlier():
    series = {r: points(500 + RNG.normal(0, 2, 100)) for r in range(8)}
    series[5] = points(700 + RNG.normal(0, 2, 100))
    result = det.rank_outlier(series, settings("rank_outlier"))
    assert result.fired and result.rank == 5
    assert result.outputs["ratio"] > 1.3
    series.pop(5)
    assert not det.rank_outlier(series, settings("rank_outlier")).fired
    two = {0: points([1, 1]), 1: points([9, 9])}
    assert not det.rank_outlier(two, settings("rank_outlier")).fired  # needs 3 ranks


def test_rank_outlier_below_for_throughput():
    series = {r: points(1000 + RNG.normal(0, 3, 50)) for r in range(6)}
    series[3] = points(600 + RNG.normal(0, 3, 50))
    result = det.rank_outlier(series, settings("rank_outlier", below=True))
    assert result.fired and result.rank == 3


def test_threshold_above_and_below():
    series = {0: points([1, 2, 50, 3]), 1: points([60, 1, 1, 1])}
    result = det.threshold(series, settings("threshold", above=10))
    assert result.fired
    assert result.outputs["count"] == 2 and result.outputs["max"] == 60
    assert not det.threshold(series, settings("threshold", above=10, min_count=3)).fired
    below = det.threshold(series, settings("threshold", below=2))
    assert below.outputs["count"] == 4


def table(times=(), steps=(), lines=(), ranks=None, files=None) -> det.EventTable:
    n = max(len(times), len(steps), len(lines))
    return det.EventTable(
        list(ranks) if ranks is not None else [0] * n,
        np.asarray(times if times else [math.nan] * n, dtype=float),
        np.asarray(steps if steps else [math.nan] * n, dtype=float),
        np.asarray(files if files is not None else [0] * n, dtype=np.int64),
        np.asarray(lines if lines else [0] * n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
    )


def test_cooccur_by_time_step_and_line():
    a = table(times=[10.0, 20.0, 30.0])
    b = table(times=[10.5, 29.0, 100.0])
    result, hits = det.cooccur(a, b, settings("cooccur", a="a", b="b", window=2.0))
    assert result.fired and result.outputs["count"] == 2
    assert hits.tolist() == [True, False, True]
    assert not det.cooccur(a, b, settings("cooccur", a="a", b="b", window=2.0, min_fraction=0.9))[
        0
    ].fired
    by_step, _ = det.cooccur(
        table(steps=[100, 200]),
        table(steps=[101]),
        settings("cooccur", a="a", b="b", by="step", window=1),
    )
    assert by_step.outputs["count"] == 1
    by_line, _ = det.cooccur(
        table(lines=[10, 50], files=[0, 1]),
        table(lines=[12, 52], files=[1, 0]),
        settings("cooccur", a="a", b="b", by="line", window=3),
    )
    assert by_line.outputs["count"] == 0  # near lines but in other files


def test_cooccur_same_rank_and_missing_times():
    a = table(times=[10.0, math.nan], ranks=[0, 1])
    b = table(times=[10.1], ranks=[1])
    assert det.cooccur(a, b, settings("cooccur", a="a", b="b", window=1))[0].outputs["count"] == 1
    assert (
        det.cooccur(a, b, settings("cooccur", a="a", b="b", window=1, same_rank=True))[0].outputs[
            "count"
        ]
        == 0
    )
    empty, _ = det.cooccur(table(), b, settings("cooccur", a="a", b="b", window=1))
    assert not empty.fired and empty.outputs["fraction"] == 0.0


def test_detectors_survive_empty_and_degenerate_series():
    empty = {0: points([])}
    constant = {0: points([5.0] * 50), 1: points([5.0] * 50)}
    for function, kind, extra in (
        (det.periodic_stalls, "periodic_stalls", {}),
        (det.drift, "drift", {}),
        (det.rank_outlier, "rank_outlier", {}),
        (det.threshold, "threshold", {"above": 1}),
    ):
        for series in ({}, empty, constant, {0: points([math.nan] * 30)}):
            result = function(series, settings(kind, **extra))
            assert isinstance(result.fired, bool)
    assert not det.periodic_stalls(constant, settings("periodic_stalls")).fired


def test_correlation_detects_a_workload_that_explains_step_time():
    tokens = RNG.choice([128, 256, 512, 2048], size=300).astype(float)
    step_ms = 20 + tokens * 0.09 * (1 + RNG.normal(0, 0.02, 300))
    series = {0: points(step_ms), 1: points(step_ms * 1.01)}
    work = {0: points(tokens), 1: points(tokens)}
    result = det.correlation(series, work, settings("correlation", **{"with": "w"}))
    assert result.fired and result.outputs["r"] > 0.9
    # A constant workload (every step the same size) explains nothing.
    flat = {0: points(np.full(300, 512.0)), 1: points(np.full(300, 512.0))}
    assert not det.correlation(series, flat, settings("correlation", **{"with": "w"})).fired
    # Unrelated noise does not correlate.
    noise = {0: points(RNG.normal(0, 1, 300)), 1: points(RNG.normal(0, 1, 300))}
    assert not det.correlation(series, noise, settings("correlation", **{"with": "w"})).fired
    # Points pair by index: disjoint steps give nothing to compare.
    shifted = {0: points(tokens, index=np.arange(1000, 1300))}
    assert (
        det.correlation(series, shifted, settings("correlation", **{"with": "w"})).outputs["count"]
        == 0
    )


def test_jump_down_finds_a_learning_rate_that_restarts_its_warmup():
    warm = [3e-4 * min(1.0, (i + 1) / 10) for i in range(60)]
    restarted = warm + [3e-4 * (i + 1) / 100 for i in range(10)]  # warm-up again after a resume
    result = det.jump({0: points(restarted)}, settings("jump", direction="down", min_ratio=20))
    assert result.fired and result.outputs["index"] == 60 and result.outputs["ratio"] >= 99
    assert result.events[0].index == 60 and result.rank == 0
    healthy = det.jump({0: points(warm)}, settings("jump", direction="both", min_ratio=20))
    assert (
        not healthy.fired
    )  # a warm-up from a small value is not a jump: it never drops, ratio < 20


def test_jump_up_finds_a_loss_spike_and_ignores_noise():
    loss = 3 + 0.1 * RNG.standard_normal(300)
    assert not det.jump({0: points(loss)}, settings("jump")).fired
    loss[200] = 11.0
    result = det.jump({0: points(loss)}, settings("jump"))
    assert result.fired and result.outputs["count"] == 1 and result.outputs["index"] == 200
    assert not det.jump({0: points(loss)}, settings("jump", min_delta=10.0)).fired


def test_jump_needs_history_and_positive_baselines():
    assert not det.jump({0: points([1.0, 50.0])}, settings("jump")).fired  # too few points before
    zeros = det.jump({0: points([0.0] * 30 + [5.0])}, settings("jump"))
    assert not zeros.fired  # no ratio against a zero baseline
    empty = det.jump({0: points([])}, settings("jump"))
    assert not empty.fired and math.isnan(empty.outputs["ratio"])
