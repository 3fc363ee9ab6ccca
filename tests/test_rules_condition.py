"""The condition language: parsing, precedence, types, errors with offsets, evaluation."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest

from trainwreck.rules import condition as cond
from trainwreck.rules import condition_nodes as nodes


class Scope:
    """Matchers oom (captures req, unalloc, name) and step; detectors stalls (periodic_stalls)."""

    matchers: ClassVar[dict[str, set[str]]] = {
        "oom": {"req", "unalloc", "alloc", "name"},
        "step": {"ms"},
        "a": set(),
        "b": set(),
        "c": set(),
    }
    detectors: ClassVar[dict[str, tuple[str, ...]]] = {
        "stalls": ("count", "ratio"),
        "gc": ("count",),
    }

    def kind(self, name: str) -> str | None:
        if name in self.matchers:
            return "matcher"
        if name in self.detectors:
            return "detector"
        if name == "step_ms":
            return "series"
        return None

    def field_problem(self, name: str, field: str) -> str | None:
        known = self.matchers.get(name) or self.detectors.get(name) or ()
        return None if field in known else f"'{name}' has no '{field}'"


class Ctx:
    def __init__(self, truths=None, counts=None, columns=None, outputs=None, strings=None):
        self.truths = truths or {}
        self.counts = counts or {}
        self.columns = columns or {}
        self.outputs = outputs or {}
        self.string_columns = strings or {}

    def truth(self, name):
        return self.truths.get(name, False)

    def count(self, name):
        return self.counts.get(name, 0)

    def numbers(self, part, field):
        if (part, field) in self.columns:
            return np.asarray(self.columns[(part, field)], dtype=float)
        return self.outputs.get((part, field), math.nan)

    def strings(self, part, field):
        return self.string_columns.get((part, field), [])


def parse(text: str):
    return cond.parse(text, Scope())[0]


def test_precedence_not_and_or():
    tree = parse("a or b and not c")
    assert tree == nodes.Or(
        (nodes.Name("a"), nodes.And((nodes.Name("b"), nodes.Not(nodes.Name("c")))))
    )
    assert tree.to_json() == [
        "or",
        [["name", "a"], ["and", [["name", "b"], ["not", ["name", "c"]]]]],
    ]
    assert cond.evaluate(tree, Ctx({"a": False, "b": True, "c": False}))
    assert not cond.evaluate(tree, Ctx({"a": False, "b": True, "c": True}))
    assert cond.evaluate(parse("(a or b) and c"), Ctx({"a": True, "c": True}))
    assert not cond.evaluate(parse("(a or b) and c"), Ctx({"a": True}))


def test_n_of():
    tree = parse("2 of (a, b, c)")
    assert isinstance(tree, nodes.NOf) and tree.needed == 2 and len(tree.items) == 3
    assert cond.evaluate(tree, Ctx({"a": True, "c": True}))
    assert not cond.evaluate(tree, Ctx({"b": True}))
    assert cond.evaluate(
        parse("1 of (a, stalls.count >= 3)"), Ctx(outputs={("stalls", "count"): 3.0})
    )


def test_arithmetic_precedence_and_any_row_semantics():
    tree = parse("oom.unalloc > 0.2 * oom.req + 1")
    assert tree.to_json() == [
        "cmp",
        ">",
        ["attr", "oom", "unalloc"],
        ["bin", "+", ["bin", "*", ["num", 0.2], ["attr", "oom", "req"]], ["num", 1.0]],
    ]
    columns = {("oom", "unalloc"): [10.0, 500.0], ("oom", "req"): [1000.0, 1000.0]}
    assert cond.evaluate(tree, Ctx(columns=columns))  # the second match satisfies it
    columns = {("oom", "unalloc"): [10.0, 150.0], ("oom", "req"): [1000.0, 1000.0]}
    assert not cond.evaluate(tree, Ctx(columns=columns))
    assert cond.evaluate(parse("-oom.req < -(2 - 1)"), Ctx(columns={("oom", "req"): [5.0]}))
    assert cond.evaluate(parse("oom.req / 2 == 2.5"), Ctx(columns={("oom", "req"): [5.0]}))


def test_missing_values_and_division_by_zero_do_not_match():
    tree = parse("oom.unalloc / oom.req > 0.5")
    assert not cond.evaluate(
        tree, Ctx(columns={("oom", "unalloc"): [math.nan], ("oom", "req"): [1.0]})
    )
    assert not cond.evaluate(tree, Ctx(columns={("oom", "unalloc"): [5.0], ("oom", "req"): [0.0]}))
    assert not cond.evaluate(tree, Ctx(columns={("oom", "unalloc"): [], ("oom", "req"): []}))


def test_units_in_literals():
    assert parse("oom.req >= 1GiB").right == nodes.Num(float(1 << 30))
    assert parse("oom.req > 2.5MB").right == nodes.Num(2.5e6)
    assert parse("stalls.ratio > 300ms").to_json()[3] == ["num", 300.0]
    assert parse("stalls.ratio > 2s").to_json()[3] == ["num", 2000.0]


def test_count_and_detector_outputs():
    tree = parse("count(step) > 50 and stalls.count >= 3")
    ctx = Ctx(counts={"step": 51}, outputs={("stalls", "count"): 3.0})
    assert cond.evaluate(tree, ctx)
    ctx = Ctx(counts={"step": 50}, outputs={("stalls", "count"): 3.0})
    assert not cond.evaluate(tree, ctx)


def test_string_comparison():
    tree = parse('oom.name == "OutOfMemoryError"')
    assert tree == nodes.StrEq("==", nodes.Attr("oom", "name"), "OutOfMemoryError")
    assert cond.evaluate(tree, Ctx(strings={("oom", "name"): ["RuntimeError", "OutOfMemoryError"]}))
    assert not cond.evaluate(tree, Ctx(strings={("oom", "name"): ["RuntimeError"]}))
    assert cond.evaluate(parse("oom.name != 'x'"), Ctx(strings={("oom", "name"): ["y"]}))


def test_referenced_fields_and_names_walk_every_branch():
    tree = parse("(oom and oom.unalloc > 1) or (step and step.ms > 2) or 2 of (a, b, count(c) > 1)")
    assert cond.referenced_fields(tree) == {("oom", "unalloc"), ("step", "ms")}
    assert cond.referenced_names(tree) == {"oom", "step", "a", "b", "c"}
    # the JSON form, as the bundle stores it, reads the same
    assert cond.referenced_fields(tree.to_json()) == {("oom", "unalloc"), ("step", "ms")}


@pytest.mark.parametrize(
    "text",
    [
        "a or b and not c",
        "2 of (a, b, c)",
        "oom.unalloc > 0.2 * oom.req + 1",
        "-oom.req < -(2 - 1) and oom.req / 2 == 2.5",
        'oom.name != "x" or count(step) > 50 or true',
    ],
)
def test_the_json_form_reads_back_to_the_same_tree(text):
    tree = parse(text)
    assert cond.from_json(tree.to_json()) == tree
    ctx = Ctx(
        {"a": True, "c": True},
        columns={("oom", "req"): [5.0], ("oom", "unalloc"): [500.0]},
        counts={"step": 51},
        strings={("oom", "name"): ["y"]},
    )
    assert cond.evaluate(tree.to_json(), ctx) == cond.evaluate(tree, ctx)


@pytest.mark.parametrize(
    "data",
    [
        [],
        ["nope"],
        ["cmp", ">", ["name", "a"], ["num", 1.0]],
        ["not", ["num", 1.0]],
        "a",
        ["streq", "==", ["num", 1.0], "x"],
    ],
)
def test_a_malformed_json_form_is_refused(data):
    with pytest.raises(ValueError):
        cond.from_json(data)


@pytest.mark.parametrize(
    ("text", "offset", "message"),
    [
        ("stalz", 0, "unknown name 'stalz'"),
        ("a and stalz", 6, "unknown name 'stalz'"),
        ("oom.nope > 1", 4, "'oom' has no 'nope'"),
        ("a and", 5, "condition ends too early"),
        ("a b", 2, "unexpected 'b' after a complete condition"),
        ("(a or b", 7, "expected ')'"),
        ("a = b", 2, "use '==' to compare"),
        ("a && b", 2, "write 'and'"),
        ("oom.req > 1 > 0", 12, "comparisons cannot be chained"),
        ("oom.req + a > 1", 10, "needs numbers, not a condition"),
        ("oom.req > step.ms", 10, "one comparison may use captures of one matcher only"),
        ("oom.req", 0, "found a number"),
        ("3 of (a, b)", 0, "'3 of' needs at least 3 conditions"),
        ("1.5 of (a, b)", 0, "whole number"),
        ("oom.req > 5parsecs", 11, "unknown unit 'parsecs'"),
        ("step_ms", 0, "'step_ms' is a series"),
        ("'abc", 0, "unterminated string"),
        ("", 0, "empty condition"),
        ("oom.name < 'x'", 9, "strings can only be compared with == or !="),
        ("count(zzz) > 1", 6, "unknown name 'zzz'"),
    ],
)
def test_errors_have_offsets(text, offset, message):
    with pytest.raises(cond.ConditionError) as caught:
        parse(text)
    assert message in caught.value.message
    assert caught.value.offset == offset


def test_pathological_conditions_are_refused_not_crashing():
    with pytest.raises(cond.ConditionError, match="nests deeper"):
        parse("(" * 500 + "a" + ")" * 500)
    with pytest.raises(cond.ConditionError, match="longer than"):
        parse("a or " * 2000 + "a")
    with pytest.raises(cond.ConditionError, match="nests deeper"):
        parse("not " * 500 + "a")


# -- `NAME where (...)`: every test on the same match -----------------------------------------

# Two OOM messages: the first has a large reserve and a small request missing, the second a
# large request: each test below holds on one of them, never both on the same one.
TWO_OOMS = Ctx(
    truths={"oom": True, "a": True},
    counts={"oom": 2},
    columns={("oom", "unalloc"): [300.0, 10.0], ("oom", "req"): [1024.0, 20.0]},
    outputs={("stalls", "count"): 3.0},
    strings={("oom", "name"): ["OutOfMemoryError", "AcceleratorError"]},
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # outside `where` each comparison may hold on a different match ...
        ("oom.unalloc >= 128 and oom.unalloc > 0.2 * oom.req and oom.req < 100", True),
        # ... inside, on one match at once
        ("oom where (oom.unalloc >= 128 and oom.unalloc > 0.2 * oom.req and oom.req < 100)", False),
        ("oom where (oom.unalloc >= 128 and oom.req > 1000)", True),
        ("oom where (oom.unalloc >= 128 and not (oom.req > 1000))", False),
        ("oom where (oom.unalloc < 128 or oom.req > 1000)", True),
        ("oom where (2 of (oom.unalloc > 100, oom.req < 100, oom.req > 10))", True),
        ("oom where (2 of (oom.unalloc > 100, oom.req < 100, false))", False),
        # string captures, part names and detector outputs inside, the same for every match
        ('oom where (oom.name == "AcceleratorError" and oom.req > 1000)', False),
        ('oom where (oom.name != "AcceleratorError" and oom.req > 1000)', True),
        ("oom where (a and stalls.count >= 3 and oom.req > 1000)", True),
        ("oom where (b or oom.req > 5000)", False),
        ("oom where (count(oom) == 2 and oom.req < 100)", True),
    ],
)
def test_where_tests_one_match_at_a_time(text: str, expected: bool) -> None:
    tree = parse(text)
    assert cond.evaluate(tree, TWO_OOMS) is expected
    assert cond.evaluate(tree.to_json(), TWO_OOMS) is expected  # as the bundle stores it


def test_where_over_a_matcher_that_never_matched_is_false() -> None:
    tree = parse("oom where (true)")
    assert cond.evaluate(tree, Ctx()) is False
    assert cond.evaluate(parse("not (oom where (oom.req > 1))"), Ctx()) is True


def test_where_names_its_matcher_and_fields() -> None:
    tree = parse("oom where (oom.req > 1 and step)")
    assert tree == nodes.Where(
        "oom",
        nodes.And(
            (nodes.Compare(">", nodes.Attr("oom", "req"), nodes.Num(1.0)), nodes.Name("step"))
        ),
    )
    assert cond.referenced_names(tree) == {"oom", "step"}
    assert cond.referenced_fields(tree) == {("oom", "req")}


@pytest.mark.parametrize(
    ("text", "offset", "words"),
    [
        ("oom where (step.ms > 1)", 11, "only captures of 'oom'"),
        ("stalls where (true)", 0, "'where' follows a matcher; 'stalls' is a detector"),
        ("oom where (step where (true))", 16, "'where' cannot be nested"),
        ("oom where oom.req > 1", 10, "expected '(' after 'where'"),
        ("oom where (oom.req)", 11, "expected a condition"),
        ("where", 0, "unexpected keyword 'where'"),
    ],
)
def test_where_errors_say_where(text: str, offset: int, words: str) -> None:
    with pytest.raises(cond.ConditionError) as caught:
        parse(text)
    assert caught.value.offset == offset
    assert words in str(caught.value)
