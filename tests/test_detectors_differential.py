"""The fast paths of the detectors against the straightforward computation they replace.

`jump` takes its trailing medians only where a bound says a jump is possible (detectors._may_jump);
these tests run it both ways, and against the per-window median it used to take everywhere, on
random series with NaN and inf, ties, zeros, negative values, huge values and short series, and
require the same result, field by field.
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
