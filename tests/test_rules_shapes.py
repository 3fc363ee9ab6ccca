"""Line shapes (shapes.py): what the engine reads off a line's shape is what the per-line path
reads off the line itself. The whole-scan comparison is in test_diagnose_bulk.py; these tests
check the pieces on inputs built to hit their edges."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from tests.test_diagnose_bulk import gc_step_log
from trainwreck.engine import lineinfo, prefixes
from trainwreck.engine import state as st
from trainwreck.engine.shapes import MASK, Shape, ShapeRows, _ranks, _times

ROOT = Path(__file__).resolve().parents[1]


def _shaped(
    lines: list[bytes],
) -> tuple[ShapeRows, np.ndarray, dict[int, np.ndarray], dict[int, Shape]]:
    """The lines as ShapeRows, with their rows and shapes keyed as ShapeRows.batches keys them."""
    keys: dict[bytes, int] = {}
    shapes: dict[int, Shape] = {}
    order = []
    for line in lines:
        masked = line.translate(MASK)
        key = keys.setdefault(masked, len(keys))
        if key not in shapes:
            _start, _end, rank = prefixes.split_spans(masked)
            shapes[key] = Shape(key, rank=rank, time=lineinfo.time_spans(masked))
        order.append(shapes[key])
    rows = ShapeRows.of_lines(0, lines, list(range(len(lines))), [0] * len(lines), order)
    rows_of = {key: np.flatnonzero(rows.keys == key) for key in shapes}
    return rows, np.frombuffer(rows.data, dtype=np.uint8), rows_of, shapes


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_times_are_parse_time() -> None:
    rng = random.Random(3)
    lines = []
    for _ in range(3000):
        year = rng.choice([1, 1969, 1970, 2000, 2024, 2100, 9999, 0])
        month = rng.choice([0, 1, 2, 3, 7, 12, 13, 99])
        day, hour, minute, second = (rng.randint(0, 99) for _ in range(4))
        frac = "".join(rng.choice("0123456789") for _ in range(rng.choice([0, 1, 3, 6, 9, 15])))
        stamp = f"{year:04d}-{month:02d}-{day:02d}{rng.choice(' T')}{hour:02d}:{minute:02d}:{second:02d}"
        if frac:
            stamp += rng.choice(".,") + frac
        lines.append(
            f"[default{rng.randint(0, 7)}]:[{stamp}] INFO step {rng.randint(1, 9999)}".encode()
        )
    for _ in range(300):  # glog, and no time at all
        mo, d = rng.randint(0, 13), rng.randint(0, 40)
        frac = "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 6, 20])))
        lines.append(f"I{mo:02d}{d:02d} 12:34:56.{frac} 123 file.cc:10] step 5".encode())
        lines.append(f"step {rng.randint(1, 99)} loss 2.5".encode())
    got = _times(*_shaped(lines))
    for line, time in zip(lines, got.tolist(), strict=True):
        assert _same(time, lineinfo.parse_time(line)), line


def test_prefix_spans_ignore_which_digits() -> None:
    """Prefixes are found alike on a line and on its shape, and their ranks read alike."""
    lines = [
        line.encode("utf-8", "replace")
        for path in sorted((ROOT / "tests" / "logs").rglob("*.log"))
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:50]
    ]
    lines += [
        b"[default12]:[rank3]:step 1",
        b"node-7: [default3]:x",
        b"[1,12345678901]<stdout>:[rank2]:y",  # a 'rank' of 11 digits is none; the next one is
        b"worker-12: 3: step",
        b"12345: (pid=77) msg",
    ]
    assert len(lines) > 3000
    for line in lines:
        spans = prefixes.split_spans(line)
        assert prefixes.split_spans(line.translate(MASK)) == spans, line
        rank, body = prefixes.split_prefix(line)
        assert prefixes.rank_of(line, spans[2]) == rank
        assert line[spans[0] : spans[1]] == body
    ranks = _ranks(*_shaped(lines), file_rank="from-file")
    for line, rank in zip(lines, ranks, strict=True):
        expected = lineinfo.split_prefix(line)[0]
        assert rank == (expected if expected is not None else "from-file"), line


def test_a_shape_holds_its_lines_facts() -> None:
    """facts.py on the masked line gives what it gives on the line itself: the same offsets,
    record flag, inline rank span and time fields, the same digit-blind patterns hit, with the
    same group spans. That is what lets a shape be only the key the facts are kept under."""
    from trainwreck.compile.packs import compile_folder
    from trainwreck.engine import Engine
    from trainwreck.engine.facts import facts_of, group_spans, inline_rank
    from trainwreck.rules import regexes

    bundle, _ = compile_folder(ROOT)
    engine = Engine(bundle.rules)
    blind = [regexes.digit_blind(p) for p in engine.pattern_list]
    lines = [
        line.encode("utf-8", "replace")
        for path in sorted((ROOT / "tests" / "logs").rglob("*.log"))
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    lines += [b"[rank3]: step 120 rank=4 loss 7.25", b'{"rank": 2, "loss": 1.5}']
    compared = 0
    for line in lines:
        masked = line.translate(MASK)
        own, shaped = facts_of(engine.set, line, True), facts_of(engine.set, masked, True)
        assert (own.start, own.end, own.rank, own.record) == (
            shaped.start,
            shaped.end,
            shaped.rank,
            shaped.record,
        ), line
        body, masked_body = own.body(line), shaped.body(masked)
        assert inline_rank(body) == inline_rank(masked_body), line
        assert lineinfo.time_spans(line) == lineinfo.time_spans(masked), line
        own_hits = {i for i in own.hits if blind[i]}
        assert own_hits == {i for i in shaped.hits if blind[i]}, line
        for index in own_hits:
            regex = engine.users[index][0].regex
            assert list(group_spans(regex, body)) == list(group_spans(regex, masked_body)), line
            compared += 1
    assert compared > 1000  # the regression logs hit many digit-blind patterns


def _buffer(values: list[float]) -> st.SeriesBuffer:
    buffer = st.SeriesBuffer()
    for i, value in enumerate(values):
        buffer.add(value, float(i), math.nan, 0, i + 1, 10 * i)
    return buffer


def test_thinning_keeps_the_outlying_points() -> None:
    values = [500.0 + (i % 3) for i in range(1000)]
    for at in (37, 74, 111, 500, 999):
        values[at] = 900.0  # stalls
    values[600] = 100.0  # a drop
    buffer = _buffer(values)
    while buffer.count > 100:
        buffer.thin()
    points = buffer.points()
    assert buffer.thinned and buffer.offered == 1000 and buffer.count == len(points.value)
    kept = dict(zip(points.index.tolist(), points.value.tolist(), strict=True))
    for at in (37, 74, 111, 500, 999, 600):
        assert kept.get(float(at)) == values[at]  # with its own index and line
    assert points.line.tolist() == [int(i) + 1 for i in points.index.tolist()]


def test_series_stay_within_the_budget() -> None:
    runs = [st.RuleRun.__new__(st.RuleRun) for _ in range(2)]
    shared = {0: _buffer([1.0] * 5000), 1: _buffer([2.0] * 3000)}
    runs[0].series = {"a": shared, "b": {0: _buffer([3.0] * 100)}}
    runs[1].series = {"a": shared}  # a series shared by two rules counts once
    st.thin_series(runs, 4000)
    counts = [b.count for b in (shared[0], shared[1], runs[0].series["b"][0])]
    assert sum(counts) <= 4000
    # the longest first, until they fit: 5000 -> 2500, then 3000 -> 1500, then 2500 -> 1250
    assert counts == [1250, 1500, 100]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_thinned_step_log_still_shows_its_stalls(tmp_path, monkeypatch, jobs) -> None:
    """Past the memory budget the series are thinned; the GC stalls still stand out, and the
    report says how much was analysed."""
    from trainwreck.diagnose import diagnose
    from trainwreck.engine import parallel, reading

    monkeypatch.setattr(st, "SERIES_BUDGET", 20_000)
    monkeypatch.setattr(reading, "BLOCK", 64 << 10)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1 << 20)
    log = gc_step_log(tmp_path / "combined.log", 6000)
    report = diagnose([str(log)], ROOT, jobs=jobs).to_json()
    assert "python-gc-straggler" in {f["entry"] for f in report["findings"]}
    assert "was thinned to stay within memory" in repr(report)


def test_decimal_values_are_float() -> None:
    """captures.decimal_values, the numpy reader of plain decimal captures, gives exactly the
    float() of each capture, for every layout of up to 15 digits (signs, leading and trailing
    points); decimal_layout refuses what is not a plain decimal."""
    from trainwreck.engine import captures

    rng = random.Random(9)
    by_layout: dict[bytes, list[bytes]] = {}
    for _ in range(20000):
        whole = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 9)))
        decimals = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 15 - len(whole))))
        if not whole and not decimals:
            continue
        text = (
            rng.choice(["", "-", "+"])
            + whole
            + ("." + decimals if decimals or rng.random() < 0.2 else "")
        )
        by_layout.setdefault(text.encode().translate(MASK), []).append(text.encode())
    assert len(by_layout) > 300
    for texts in by_layout.values():
        layout = captures.decimal_layout(texts[0])
        assert layout is not None, texts[0]
        digits = np.frombuffer(b"".join(texts), dtype=np.uint8).reshape(len(texts), -1)
        got = captures.decimal_values(digits, layout).tolist()
        assert got == [float(t) for t in texts], texts[:3]
    for text in (b"1e5", b"1,234", b"12 ms", b"0x1f", b"1234567890123456", b"-", b"."):
        assert captures.decimal_layout(text) is None, text
