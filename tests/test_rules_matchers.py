"""The rule language part by part, through the engine: matchers, units, ranks, timestamps, series,
blocks, evidence caps, rule validation errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainwreck import engine as eng
from trainwreck.compile.packs import RuleSet
from trainwreck.diagnose import Report, diagnose
from trainwreck.engine import lineinfo
from trainwreck.engine.state import MAX_EVIDENCE_PER_MATCHER
from trainwreck.rules.model import load_rules


def make_rule(root: Path, body: str, rule_id: str = "t-rule", entry: str = "t-entry") -> dict:
    """Write a rule (body: the matcher/series/detector/condition/report keys) and load it."""
    (root / "entries").mkdir(exist_ok=True)
    (root / "entries" / f"{entry}.yaml").write_text("title: Test entry\n")
    (root / "rules").mkdir(exist_ok=True)
    text = (
        "# yaml-language-server: $schema=../schemas/rule.schema.json\n"
        f"id: {rule_id}\nentry: {entry}\ntitle: test rule\ndescription: test\nconfidence: 0.5\n"
        + body.strip("\n")
        + "\ntests: {match: [tests/logs/x], clean: [tests/logs/y]}\n"
    )
    (root / "rules" / f"{rule_id}.yaml").write_text(text)
    loaded = load_rules(root)
    assert not loaded.problems, [str(p) for p in loaded.problems]
    return loaded.rules[0]


def problems_of(root: Path, body: str) -> list[str]:
    (root / "entries").mkdir(exist_ok=True)
    (root / "entries" / "t-entry.yaml").write_text("title: T\n")
    (root / "rules").mkdir(exist_ok=True)
    text = (
        "id: t-rule\nentry: t-entry\ntitle: t\ndescription: d\nconfidence: 0.5\n"
        + body.strip("\n")
        + "\ntests: {match: [a], clean: [b]}\n"
    )
    (root / "rules" / "t-rule.yaml").write_text(text)
    return [str(p) for p in load_rules(root).problems]


def run(rule: dict, *paths: Path) -> Report:
    return diagnose([str(p) for p in paths], rule_set=RuleSet(rules=[rule], entries={}))


def scan(rule: dict, *paths: Path) -> eng.RuleRun:
    engine = eng.Engine([rule])
    return engine.scan([(str(p), str(p)) for p in paths]).runs[0]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_regex_matcher_units_and_unit_capture(tmp_path):
    rule = make_rule(
        tmp_path,
        r"""
matchers:
  oom:
    regex: 'Tried to allocate (?P<req>[\d.]+) (?P<req_u>[KMGT]?i?B|bytes); (?P<t>[\d.]+) ?(?P<t_u>ms|s); (?P<n>[\d,]+) items'
    values: {req: {unit_capture: req_u}, t: {unit_capture: t_u}, n: number}
condition: 'oom and oom.req >= 2GiB and oom.t == 1500 and oom.n == 1234'
""",
    )
    log = write(tmp_path / "a.log", "x\nTried to allocate 2.00 GiB; 1.5 s; 1,234 items\n")
    state = scan(rule, log).matchers["oom"]
    assert state.count == 1
    report = run(rule, log)
    assert report.rules == {"t-rule"}
    log2 = write(tmp_path / "b.log", "Tried to allocate 2.00 MiB; 1.5 s; 1,234 items\n")
    assert run(rule, log2).findings == []


def test_fixed_units_normalise_times_and_sizes(tmp_path):
    rule = make_rule(
        tmp_path,
        r"""
matchers:
  m:
    regex: 'a=(?P<a>[\d.]+) b=(?P<b>[\d.]+) c=(?P<c>[\d.]+) d=(?P<d>\d+)'
    values: {a: s, b: us, c: MiB, d: KB}
condition: 'm.a == 2000 and m.b == 0.5 and m.c == 3145728 and m.d == 4000'
""",
    )
    log = write(tmp_path / "a.log", "a=2 b=500 c=3 d=4\n")
    assert run(rule, log).rules == {"t-rule"}


def test_json_matcher_filters_and_fields(tmp_path):
    rule = make_rule(
        tmp_path,
        """
matchers:
  gc:
    json: {event: gc, generation: 2}
    values: {duration_ms: ms}
condition: 'gc and gc.duration_ms > 100 and count(gc) == 2'
""",
    )
    lines = [
        {"v": 1, "t": 1.0, "rank": 3, "event": "gc", "generation": 2, "duration_ms": 150.0},
        {"v": 1, "t": 2.0, "rank": 3, "event": "gc", "generation": 0, "duration_ms": 900.0},
        {"v": 1, "t": 3.0, "rank": 1, "event": "gc", "generation": 2, "duration_ms": 5.0},
        {"v": 1, "t": 4.0, "rank": 1, "event": "step", "step": 1, "duration_ms": 40.0},
    ]
    log = write(tmp_path / "probe.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n{not json\n")
    report = run(rule, log)
    assert report.rules == {"t-rule"}
    assert list(report.findings[0].ranks) == [1, 3]
    assert report.findings[0].initiating_rank == 3  # earliest by JSON t


def test_block_matcher_start_end_capture_and_max_lines(tmp_path):
    rule = make_rule(
        tmp_path,
        r"""
matchers:
  tb:
    block:
      start: '^Traceback \(most recent call last\):'
      end: '^(?P<exc>[\w.]+(?:Error|Exception)): (?P<msg>.*)'
      max_lines: 6
      capture: ['File "(?P<file>[^"]+)", line (?P<line>\d+)']
condition: 'tb.exc == "ValueError"'
""",
    )
    good = write(
        tmp_path / "good.log",
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/w/train.py", line 12, in <module>\n'
        "[rank0]: unrelated line from another rank\n"
        "[rank1]:     main()\n"
        "[rank1]: ValueError: bad value\n",
    )
    state = scan(rule, good).matchers["tb"]
    assert state.count == 1
    report = run(rule, good)
    assert report.rules == {"t-rule"}
    assert [e.line for e in report.findings[0].evidence] == [1, 5]
    assert list(report.findings[0].ranks) == [1]
    # The end arrives too late (beyond max_lines): no block.
    late = write(
        tmp_path / "late.log",
        "Traceback (most recent call last):\n" + "  x\n" * 10 + "ValueError: v\n",
    )
    assert scan(rule, late).matchers["tb"].count == 0
    # A traceback cut short (no final error line) does not match.
    cut = write(tmp_path / "cut.log", 'Traceback (most recent call last):\n  File "a.py", line 1\n')
    assert scan(rule, cut).matchers["tb"].count == 0
    # The end line of another rank does not close this rank's block.
    other = write(
        tmp_path / "other.log",
        "[rank1]: Traceback (most recent call last):\n[rank2]: ValueError: v\n",
    )
    assert scan(rule, other).matchers["tb"].count == 0


@pytest.mark.parametrize(
    ("name", "line", "rank"),
    [
        ("combined.log", "[rank3]: boom", 3),
        ("combined.log", "[default5]:boom", 5),
        ("combined.log", "[1,6]<stderr>:boom", 6),
        ("combined.log", "node-1: [default2]: boom", 2),
        ("combined.log", "[Rank 7] boom", 7),
        ("combined.log", "rank=4 boom", 4),
        ("combined.log", "global rank 9 boom", 9),
        ("combined.log", "local_rank=1 boom", None),
        ("rank_3.log", "boom", 3),
        ("rank12.log", "boom", 12),
        ("probe-rank2.jsonl", "boom", 2),
        ("node-2/train.log", "boom", "node-2"),
        ("logs/5.log", "boom", 5),
        ("worker.log", "worker-1: boom", "worker-1"),
    ],
)
def test_rank_attribution(tmp_path, name, line, rank):
    rule = make_rule(tmp_path, "matchers:\n  b:\n    regex: 'boom'\ncondition: b\n")
    log = write(tmp_path / name, "start\n" + line + "\n")
    state = scan(rule, log).matchers["b"]
    assert list(state.rank_counts) == [rank]


def test_rank_capture_wins(tmp_path):
    rule = make_rule(
        tmp_path, "matchers:\n  b:\n    regex: 'boom on (?P<rank>\\d+)'\ncondition: b\n"
    )
    log = write(tmp_path / "rank1.log", "[rank2]: boom on 7\n")
    assert list(scan(rule, log).matchers["b"].rank_counts) == [7]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2024-03-14 23:07:56 x", 1710457676.0),
        ("[2024-03-14T23:07:56.250Z] x", 1710457676.25),
        ("2024-03-14 23:07:56,5 INFO x", 1710457676.5),
        ("no time here", math.nan),
    ],
)
def test_timestamps(line, expected):
    got = lineinfo.parse_time(line)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_glog_timestamps_are_comparable():
    first = lineinfo.parse_time("[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] x")
    second = lineinfo.parse_time("I1218 20:27:22.426 x")
    assert second - first == pytest.approx(1.0, abs=0.01)


def test_series_from_several_matchers_per_rank_with_index(tmp_path):
    rule = make_rule(
        tmp_path,
        r"""
matchers:
  a:
    regex: 'iteration (?P<step>\d+) took (?P<ms>[\d.]+) ms'
    values: {ms: ms}
  b:
    regex: 'step=(?P<step>\d+) time=(?P<ms>[\d.]+)s'
    values: {ms: s}
series:
  step_ms: {matcher: [a, b], value: ms, index: step}
condition: a or b
""",
    )
    log = write(
        tmp_path / "mixed.log",
        "[rank0]: iteration 1 took 100 ms\n[rank1]: step=1 time=0.2s\n[rank0]: step=2 time=0.3s\n[rank1]: noise\n",
    )
    series = scan(rule, log).series["step_ms"]
    assert set(series) == {0, 1}
    points = series[0].points()
    assert points.value.tolist() == [100.0, 300.0]
    assert points.index.tolist() == [1.0, 2.0]
    assert points.line.tolist() == [1, 3]
    assert series[1].points().value.tolist() == [200.0]


def test_evidence_is_capped_per_matcher(tmp_path):
    rule = make_rule(
        tmp_path, "matchers:\n  b:\n    regex: 'boom'\ncondition: b\nreport: {max_evidence: 3}\n"
    )
    log = write(tmp_path / "many.log", "boom\n" * 10_000)
    state = scan(rule, log).matchers["b"]
    assert state.count == 10_000
    assert len(state.evidence) == MAX_EVIDENCE_PER_MATCHER
    assert len(run(rule, log).findings[0].evidence) == 3


def test_regex_anchor_matches_after_rank_prefix(tmp_path):
    rule = make_rule(tmp_path, "matchers:\n  b:\n    regex: '^RuntimeError: x$'\ncondition: b\n")
    log = write(tmp_path / "a.log", "[rank0]: RuntimeError: x\r\nRuntimeError: xy\n")
    assert scan(rule, log).matchers["b"].count == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("matchers:\n  m:\n    regex: '(a)\\1'\ncondition: m\n", "backreferences"),
        ("matchers:\n  m:\n    regex: 'foo(?=bar)'\ncondition: m\n", "lookaround"),
        ("matchers:\n  m:\n    regex: '(unclosed'\ncondition: m\n", "RE2 cannot compile"),
        ("matchers:\n  m:\n    regex: 'x'\ncondition: stalz\n", "condition: unknown name 'stalz'"),
        (
            "matchers:\n  m:\n    regex: 'x (?P<a>\\d)'\n    values: {b: ms}\ncondition: m\n",
            "'b' is not a named capture",
        ),
        (
            "matchers:\n  m:\n    regex: 'x'\nseries:\n  s: {matcher: zz, value: v}\ncondition: m\n",
            "unknown matcher 'zz'",
        ),
        (
            "matchers:\n  m:\n    regex: 'x'\ndetectors:\n  d:\n    drift: {series: nope}\ncondition: m\n",
            "unknown series 'nope'",
        ),
        (
            "matchers:\n  m:\n    regex: 'x'\ndetectors:\n  d:\n    cooccur: {a: m, b: m, by: step, window: 1}\ncondition: m\n",
            "needs a 'step' capture",
        ),
        (
            "matchers:\n  m:\n    regex: 'x'\ncondition: m\nreport: {evidence: [nope]}\n",
            "unknown part 'nope'",
        ),
        ("matchers:\n  m:\n    regex: 'x'\ncondition: m\nboost: {zz: 0.1}\n", "unknown part 'zz'"),
        ("matchers:\n  and:\n    regex: 'x'\ncondition: 'true'\n", "reserved word"),
        ("matchers:\n  m:\n    regex: 'x'\n    json: {a: 1}\ncondition: m\n", "matchers.m"),
        (
            "matchers:\n  m:\n    regex: 'x'\ncondition: m\nreport: {initiating_rank: {detector: m}}\n",
            "unknown detector 'm'",
        ),
    ],
)
def test_validation_errors_are_located(tmp_path, body, message):
    problems = problems_of(tmp_path, body)
    assert any(message in p for p in problems), problems
    assert all(p.startswith("rules/t-rule.yaml:") for p in problems), problems


def test_condition_error_points_at_the_column(tmp_path):
    problems = problems_of(tmp_path, "matchers:\n  m:\n    regex: 'x'\ncondition: 'm and stalz'\n")
    assert problems == ["rules/t-rule.yaml:9:19: condition: unknown name 'stalz'"]
    problems = problems_of(
        tmp_path, "matchers:\n  m:\n    regex: 'x'\ncondition: >-\n  m\n  and stalz\n"
    )
    assert problems == ["rules/t-rule.yaml:11:7: condition: unknown name 'stalz'"]


def test_regex_error_points_at_the_pattern(tmp_path):
    problems = problems_of(tmp_path, "matchers:\n  m:\n    regex: 'ab(?=c)'\ncondition: m\n")
    assert problems == [
        "rules/t-rule.yaml:8:15: matchers.m.regex: lookaround ((?=, (?!, (?<=, (?<!) is not supported by RE2"
    ]


def test_id_must_match_file_and_entry_must_exist(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "entries").mkdir()
    (tmp_path / "rules" / "other-name.yaml").write_text(
        "id: t-rule\nentry: missing-entry\ntitle: t\ndescription: d\nconfidence: 0.5\n"
        "matchers: {m: {regex: x}}\ncondition: m\ntests: {match: [a], clean: [b]}\n"
    )
    problems = [str(p) for p in load_rules(tmp_path).problems]
    assert (
        "rules/other-name.yaml:1:5: id: id 't-rule' must equal the file name 'other-name'"
        in problems
    )
    assert any("entry 'missing-entry' does not exist" in p for p in problems)
