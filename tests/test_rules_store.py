"""The one recorder (engine/store.py): a batch of many rows records what the same rows record
one at a time, as batches of one (rows.Batch) and as lines on their own (rows.OneLine); so the
numpy series feed (feed_bulk) equals the row-by-row one (feed_rows), thinned buffers included.
And a line's captures convert through convert_columns as a column of one."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainwreck.compile.packs import compile_folder
from trainwreck.engine import state as st
from trainwreck.engine import store
from trainwreck.engine.captures import convert_columns, plan_of
from trainwreck.engine.matching import Line
from trainwreck.engine.rows import Batch, OneLine, rank_codes
from trainwreck.rules.matchers import UnitCapture
from trainwreck.rules.rule import Rule

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rules() -> list[Rule]:
    bundle, _ = compile_folder(ROOT)
    return [Rule.from_dict(rule) for rule in bundle.rules]


def _value(rng: random.Random) -> Any:
    return rng.choice(
        [
            lambda: rng.uniform(-5, 500),
            lambda: float(rng.randrange(0, 40)),
            lambda: math.nan,
            lambda: math.inf,
            lambda: str(rng.randrange(0, 10_000)),
            lambda: f"{rng.uniform(0, 9):.3f}",
            lambda: "1,234.5",
            lambda: "inf",
            lambda: None,
            lambda: "n/a",
        ]
    )()


def _batch(rng: random.Random, n: int, file_id: int = 1) -> tuple[Batch, list[bytes]]:
    lines = [
        f"step {i} loss {rng.random():.4f} on rank {rng.randrange(4)}".encode() for i in range(n)
    ]
    lengths = np.array([len(line) for line in lines], dtype=np.int64)
    ends = np.cumsum(lengths + 1) - 1
    ranks = [rng.choice([0, 1, 2, 3, None]) for _ in range(n)]
    times = np.array([rng.choice([math.nan, 1.7e9 + rng.random() * 100]) for _ in range(n)])
    numbers = np.cumsum(np.array([rng.randrange(1, 4) for _ in range(n)], dtype=np.int64))
    batch = Batch(
        file_id,
        "x.log",
        numbers,
        numbers * 100,
        rank_codes(ranks),
        b"\n".join(lines),
        ends - lengths,
        ends,
        times,
        [],
    )
    return batch, lines


def _one_of(batch: Batch, i: int) -> Batch:
    at = slice(i, i + 1)
    return Batch(
        batch.file,
        batch.name,
        batch.numbers[at],
        batch.offsets[at],
        rank_codes([batch.rank(i)]),
        batch.data,
        batch.starts[at],
        batch.ends[at],
        batch.times[at],
        [],
    )


def _line_of(batch: Batch, i: int) -> OneLine:
    t = batch.t(i)
    line = Line(
        batch.file, batch.name, batch.number(i), batch.line(i), batch.rank(i), None, 0, lambda _: t
    )
    line.offset = batch.offset(i)
    return OneLine(line)


def _state(run: st.RuleRun) -> Any:
    def plain(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(
        [
            [
                (
                    name,
                    s.count,
                    list(s.rank_counts.items()),
                    [(e.file, e.line, e.text, e.rank, e.t, e.part, e.offset) for e in s.evidence],
                    list(s.first.items()),
                    {k: plain(v) for k, v in s.columns.items()},
                    None
                    if s.events is None
                    else [
                        (e.rank, e.index, e.t, e.file, e.line, e.value, e.offset) for e in s.events
                    ],
                    s.truncated,
                )
                for name, s in run.matchers.items()
            ],
            [
                (name, repr(rank), b.count, b.offered, b.stride, b.outlier_stride, b.rows.tolist())
                for name, per_rank in run.series.items()
                for rank, b in per_rank.items()
            ],
        ]
    )


def _columns(rng: random.Random, names: set[str], n: int) -> dict[str, Any]:
    columns: dict[str, Any] = {name: [_value(rng) for _ in range(n)] for name in names}
    for name in list(columns)[:1]:  # a column read straight into an array (Batch.values)
        columns[name] = np.array([rng.uniform(0, 100) for _ in range(n)])
    return columns


@pytest.mark.parametrize("seed", range(3))
def test_a_batch_records_what_its_rows_record_one_by_one(rules, monkeypatch, seed) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(store, "MAX_ROWS", 70)  # columns and events cut mid-batch
    picked = [rule for rule in rules if rule.series or rule.fields or rule.event_parts()]
    for rule in rng.sample(picked, min(12, len(picked))):
        base = st.RuleRun(rule)
        for name in rule.matchers:
            names = {"step", *(c for m, c in rule.fields if m == name)}
            for spec in rule.series.values():
                if name in spec.matchers:
                    names |= {spec.value, *([spec.index] if spec.index else [])}
            # state already there: points of earlier lines, thinned on some seeds
            warm, _ = _batch(rng, 300, file_id=0)
            store.store(base, name, _columns(rng, names, 300), warm)
            if seed:
                st.thin_series([base], 40)
            batch, _ = _batch(rng, rng.randrange(2, 60))
            columns = _columns(rng, names, len(batch))
            whole, one_by_one, lines = (copy.deepcopy(base) for _ in range(3))
            store.store(whole, name, columns, batch)
            for i in range(len(batch)):
                row = {k: v[i : i + 1] for k, v in columns.items()}
                store.store(one_by_one, name, row, _one_of(batch, i))
                store.store(lines, name, row, _line_of(batch, i))
            assert _state(whole) == _state(one_by_one) == _state(lines), (rule.id, name)


def test_a_rank_capture_names_the_rank_until_the_cap(rules, monkeypatch) -> None:
    mapping = next(rule for rule in rules if not rule.series).to_dict()
    pattern = "rank (?P<rank>\\d+)"
    mapping.update(matchers={"m": {"kind": "regex", "regex": pattern, "values": {}}})
    mapping.update(condition="m", condition_ast=["name", "m"], fields=[])
    mapping["report"] = {**mapping["report"], "evidence": ["m"]}
    rule = Rule.from_dict(mapping)
    monkeypatch.setattr(st, "MAX_RANKS", 3)
    rng = random.Random(1)
    batch, _ = _batch(rng, 8)
    values = ["7", "x", "8", "9", "7", "10", 11, None]
    whole, one_by_one = st.RuleRun(rule), st.RuleRun(rule)
    store.store(whole, "m", {"rank": values}, batch)
    for i in range(len(batch)):
        store.store(one_by_one, "m", {"rank": values[i : i + 1]}, _one_of(batch, i))
    assert _state(whole) == _state(one_by_one)
    counted = list(whole.matchers["m"].rank_counts)
    assert [batch.rank(i) for i in range(len(batch))] == [1, None, 0, 2, 0, 0, 0, None]
    # 7 and 8 are named while under the cap; '9', '10' and 11 would be new ranks past it, so
    # their lines keep their own rank (2, 0, 0); 'x' and None name none
    assert counted == [7, None, 8, 2, 0]


def test_a_line_converts_as_a_column_of_one() -> None:
    plan = plan_of({"mem": "GiB", "t": UnitCapture("unit", "ms"), "name": "string"})
    caps = {"mem": "1.5", "t": "20", "unit": "s", "name": "x"}
    got = convert_columns(plan, {k: [v] for k, v in caps.items()}, 1)
    assert got["mem"] == [1.5 * 2**30] and got["t"] == [20_000.0] and got["name"] == ["x"]
    # a JSON record's list as the unit, or an int too large for a float, is a NaN, not a crash
    got = convert_columns(plan, {"t": [5], "unit": [["s"]], "mem": [10**400]}, 1)
    assert math.isnan(got["t"][0]) and math.isnan(got["mem"][0])
    # the default unit where the line names none; an unknown unit is NaN
    got = convert_columns(plan, {"t": ["3", "4"], "unit": [None, "parsecs"]}, 2)
    assert got["t"][0] == 3.0 and math.isnan(got["t"][1])


@pytest.mark.parametrize("seed", range(12))
def test_first_seen_counts_each_rank_from_its_first_row(seed: int) -> None:
    """rows.first_seen, with a few ranks (a pass per rank) and with many (a sort), against the
    rows read one by one: each rank in the order it first appears, its first row, its count."""
    from trainwreck.engine.rows import first_seen

    rng = random.Random(seed)
    pool: list[Any] = [*range(rng.choice([1, 3, 16, 17, 200])), None, "node-2"]
    ranks = [rng.choice(pool) for _ in range(rng.choice([1, 2, 50, 3000]))]
    distinct, codes = rank_codes(ranks)
    expected: dict[Any, list[int]] = {}
    for row, rank in enumerate(ranks):
        expected.setdefault(rank, [row, 0])[1] += 1
    assert first_seen(distinct, codes) == [(rank, at, n) for rank, (at, n) in expected.items()]
