"""The typed rule (rules/rule.py, rules/matchers.py, rules/registry.py) against the bundle's
mapping, which stays the contract with installed rule packs: every rule of the checkout reads
into its `Rule` and writes back key for key; a malformed mapping is refused with the part that
is wrong; validation collects every problem of a rule file, each at its location."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from trainwreck.compile.packs import compile_folder
from trainwreck.rules.matchers import (
    MATCHERS,
    BlockMatcher,
    JsonMatcher,
    MatcherKind,
    PatternRole,
    RegexMatcher,
    UnitCapture,
)
from trainwreck.rules.model import load_rules
from trainwreck.rules.registry import DETECTORS, Cooccur, PeriodicStalls, Threshold
from trainwreck.rules.rule import InitiatingRank, RankHow, Rule, read_rules

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bundle_rules() -> list[dict[str, Any]]:
    bundle, _ = compile_folder(ROOT)
    return bundle.rules


def test_every_rule_of_the_checkout_round_trips(bundle_rules) -> None:
    assert len(bundle_rules) > 50
    for data in bundle_rules:
        rule = Rule.from_dict(data)
        assert rule.to_dict() == data, rule.id
        # ... through JSON too (what a bundle file holds)
        assert Rule.from_dict(json.loads(json.dumps(data))).to_dict() == data, rule.id


def test_the_round_trip_covers_every_kind_and_every_initiating_rank(bundle_rules) -> None:
    rules = [Rule.from_dict(data) for data in bundle_rules]
    kinds = {m.kind for rule in rules for m in rule.matchers.values()}
    assert kinds == set(MatcherKind)
    detectors = {d.kind for rule in rules for d in rule.detectors.values()}
    assert detectors == set(DETECTORS)
    hows = {rule.report.initiating_rank.how for rule in rules}
    assert hows == set(RankHow)
    units = [u for rule in rules for m in rule.matchers.values() for u in m.values.values()]
    assert any(isinstance(u, UnitCapture) for u in units)


def test_matchers_are_typed_by_kind_with_their_patterns_in_role_order() -> None:
    block = BlockMatcher({}, "start here", "end here", 50, ("a (?P<x>\\d+)",))
    assert block.patterns() == (
        (PatternRole.START, "start here"),
        (PatternRole.END, "end here"),
        (PatternRole.CAPTURE, "a (?P<x>\\d+)"),
    )
    assert sorted(r.order for r, _ in block.patterns()) == [0, 1, 3]  # end, capture, start
    assert RegexMatcher({"ms": "ms"}, "x").patterns() == ((PatternRole.REGEX, "x"),)
    assert JsonMatcher({}, {"event": "step"}).patterns() == ()
    assert set(MATCHERS) == set(MatcherKind)
    schema = json.loads((ROOT / "schemas" / "rule.schema.json").read_text(encoding="utf-8"))
    keys = {k for k in schema["properties"]["matchers"]["additionalProperties"]["properties"]}
    # `values` goes with every kind, `nonfinite` qualifies a `metric` matcher
    assert {row.key for row in MATCHERS.values()} == keys - {"values", "nonfinite"}


def _one(bundle_rules: list[dict[str, Any]], where: str) -> dict[str, Any]:
    for data in bundle_rules:
        if where == "detector" and data["detectors"]:
            return copy.deepcopy(data)
        if where == "block" and any(m["kind"] == "block" for m in data["matchers"].values()):
            return copy.deepcopy(data)
    raise AssertionError(where)


def test_a_malformed_mapping_is_refused_and_named(bundle_rules) -> None:
    good = _one(bundle_rules, "detector")
    missing_setting = copy.deepcopy(good)
    detector = next(iter(missing_setting["detectors"].values()))
    required = next(k for k in detector if k not in ("kind", "series", "a", "b", "with"))
    del detector[required]
    bad_kind = copy.deepcopy(good)
    next(iter(bad_kind["matchers"].values()))["kind"] = "xml"
    bad_tree = copy.deepcopy(good)
    bad_tree["condition_ast"] = ["nosuchnode"]
    no_title = copy.deepcopy(good)
    del no_title["title"]
    for broken, error in (
        (missing_setting, KeyError),
        (bad_kind, ValueError),
        (bad_tree, ValueError),
        (no_title, KeyError),
    ):
        with pytest.raises(error):
            Rule.from_dict(broken)
    rules, refused = read_rules([good, missing_setting, {"matchers": {}}, "not a mapping"])
    assert [r.id for r in rules] == [good["id"]]
    assert [name for name, _ in refused] == [good["id"], "?", "?"]
    assert isinstance(refused[0][1], KeyError)


def test_detector_settings_are_typed_per_kind() -> None:
    stalls = DETECTORS["periodic_stalls"].settings({"series": "s", "min_count": 5})
    assert isinstance(stalls, PeriodicStalls)
    assert (stalls.min_count, stalls.warmup, stalls.min_ratio) == (5, 3, 1.2)
    assert stalls.references() == ("s",)
    # A bundle compiled before `warmup` existed ran without one: it still does.
    old = {k: v for k, v in stalls.to_dict().items() if k != "warmup"}
    assert PeriodicStalls.from_dict(old).warmup == 0
    # Unset optional parameters are left out of the compiled form, and come back unset.
    above = DETECTORS["threshold"].settings({"series": "s", "above": 3})
    assert isinstance(above, Threshold) and above.below is None
    assert above.to_dict() == {"series": "s", "min_count": 1, "above": 3, "kind": "threshold"}
    assert Threshold.from_dict(above.to_dict()) == above
    # A parameter that is not a Python name ('with'), and one a rule must set (window).
    pair = DETECTORS["correlation"].settings({"series": "s", "with": "w"})
    assert pair.to_dict()["with"] == "w" and pair.references() == ("s", "w")
    assert DETECTORS["cooccur"].required == ("window",)
    with pytest.raises(TypeError):
        Cooccur.from_params({"a": "x", "b": "y"})
    # The values keep the type the rule wrote (3, not 3.0): the mapping round-trips.
    drift = DETECTORS["drift"].settings({"series": "s", "min_delta": 3})
    assert type(drift.to_dict()["min_delta"]) is int


def test_initiating_rank_reads_every_form() -> None:
    for value in ("first", "none", {"matcher": "m"}, {"detector": "d"}, {"missing_from": "m"}):
        assert InitiatingRank.from_dict(value).to_dict() == value
    assert InitiatingRank.from_dict({"missing_from": "m"}).how == RankHow.MISSING_FROM
    with pytest.raises(ValueError):
        InitiatingRank.from_dict("matcher")  # names no part


def test_validation_collects_every_problem_with_its_location(tmp_path) -> None:
    (tmp_path / "entries").mkdir()
    (tmp_path / "entries" / "t-entry.yaml").write_text("title: T\n")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "t-rule.yaml").write_text(
        "id: t-rule\nentry: t-entry\ntitle: t\ndescription: d\nconfidence: 0.5\n"
        "matchers:\n"
        "  step:\n"
        "    regex: 'step (?P<ms>\\d+)'\n"
        "    values: {ms: ms, nope: ms}\n"
        "series:\n"
        "  s: {matcher: [step, ghost], value: ms}\n"
        "detectors:\n"
        "  d: {drift: {series: missing}}\n"
        "condition: step and d\n"
        "report: {evidence: [step, nowhere], initiating_rank: {detector: nobody}}\n"
        "tests: {match: [a], clean: [b]}\n"
    )
    loaded = load_rules(tmp_path)
    found = [(p.line, p.path, p.message) for p in loaded.problems]
    assert not loaded.rules
    assert found == [
        (9, "matchers.step.values.nope", "'nope' is not a named capture of matcher 'step'"),
        (11, "series.s.matcher[1]", "unknown matcher 'ghost'"),
        (13, "detectors.d.drift.series", "unknown series 'missing'"),
        (15, "report.evidence[1]", "unknown part 'nowhere'"),
        (15, "report.initiating_rank.detector", "unknown detector 'nobody'"),
    ], found


def test_every_matcher_kind_has_its_runtime_in_the_engine() -> None:
    from trainwreck.engine.matching import KINDS

    assert set(KINDS) == set(MATCHERS)
    for kind, runtime in KINDS.items():
        assert callable(runtime.step), kind
        if runtime.reads_records:  # a kind with no pattern tells the prefilter what to look for
            assert runtime.record_literal is not None and runtime.matches_record is not None
    assert not KINDS[MatcherKind.BLOCK].batched  # it carries state from line to line
