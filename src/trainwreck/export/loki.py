"""Rules as Loki ruler alerts: each rule whose condition is about regex matches becomes a LogQL
query counting matching lines over a window, with an RE2 line filter (`|~`).

    sum by (job) (count_over_time({job=~".+"} |~ "NCCL error" [5m])) > 0

How a condition maps (a matcher m gives the vector V(m), the per-group count of lines matching
it in the window; Loki's `|~` compiles with Go's regexp, RE2 syntax):

    m                  V(m) > 0
    count(m) >= N      V(m) >= N
    a or b             (A) or (B)   (a branch Loki cannot express is left out, and listed: the
                                     alert then fires on fewer logs than the rule, never more)
    a and b            (A) and (B)
    a and not b        (A) unless (B)   (B exactly, never with branches left out)

Everything else is not exported, with the reason: detectors over series (step times, loss),
JSON and multi-line block matchers, comparisons of captured numbers, `N of (...)`, a pattern
anchored at the line start (Loki sees the raw line with the launcher's prefixes, which diagnose
strips first), and a pattern Go's regexp would read differently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainwreck.export.rulefile import AlertRule, alert_name, quote_string
from trainwreck.rules import regexes
from trainwreck.rules.condition_nodes import (
    And,
    Attr,
    Compare,
    Condition,
    Count,
    Name,
    Node,
    NOf,
    Not,
    Num,
    Or,
    Where,
)
from trainwreck.rules.matchers import BlockMatcher, JsonMatcher, RegexMatcher
from trainwreck.rules.rule import Rule

DEFAULT_SELECTOR = '{job=~".+"}'
DEFAULT_WINDOW = "5m"
DEFAULT_GROUP_BY = ("job",)

# RE2 syntax Go's regexp lacks: \C (any byte).
_GO_LACKS = (re.compile(r"(?<!\\)(?:\\\\)*\\C"), "\\C (any byte) is not in Go's regexp")
# A line filter keeps no captures: named groups become plain groups, so that patterns merged into
# one alternation cannot repeat a name (and older Go, which lacks `(?<name>`, reads them).
_NAMED_GROUP = re.compile(r"(?<!\\)((?:\\\\)*)\(\?P?<[A-Za-z_][A-Za-z0-9_]*>")
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


class Untranslatable(Exception):
    """A part of a condition LogQL cannot express; the message says why."""


@dataclass(frozen=True)
class Exported:
    rule: str
    entry: str
    expr: str
    left_out: tuple[str, ...] = ()  # branches of an `or` that are not in the alert, with why


@dataclass(frozen=True)
class NotExported:
    rule: str
    entry: str
    reason: str


@dataclass(frozen=True)
class LokiExport:
    alerts: tuple[AlertRule, ...]
    exported: tuple[Exported, ...]
    not_exported: tuple[NotExported, ...]


def logql_regex(pattern: str) -> str:
    """The pattern as Go's regexp reads it, or Untranslatable."""
    error = regexes.compile_error(pattern)
    if error is not None:
        raise Untranslatable(f"pattern is not RE2: {error[1]}")
    finder, message = _GO_LACKS
    if finder.search(pattern):
        raise Untranslatable(message)
    if pattern.startswith("^") or pattern.startswith("\\A"):
        raise Untranslatable(
            "pattern anchored at the line start: Loki sees launcher prefixes diagnose strips"
        )
    return _NAMED_GROUP.sub(r"\1(?:", pattern)


class Translator:
    """One rule's condition as a LogQL vector expression: non-empty when the condition holds."""

    def __init__(self, rule: Rule, selector: str, window: str, group_by: tuple[str, ...]):
        self.rule = rule
        self.selector = selector
        self.window = window
        self.group_by = group_by
        self.left_out: list[str] = []

    def vector(self, name: str) -> str:
        """V(m): per group, how many lines matched matcher `name` in the window."""
        return self.count_lines(self.pattern(name))

    def count_lines(self, pattern: str) -> str:
        by = ", ".join(self.group_by)
        return (
            f"sum by ({by}) (count_over_time({self.selector} |~ {quote_string(pattern)} "
            f"[{self.window}]))"
        )

    def pattern(self, name: str) -> str:
        """Matcher `name`'s pattern as a line filter, or Untranslatable."""
        matcher = self.rule.matchers.get(name)
        if matcher is None:
            detector = self.rule.detectors.get(name)
            kind = detector.kind if detector is not None else "unknown"
            raise Untranslatable(f"'{name}' is a {kind} detector over series or events")
        if isinstance(matcher, JsonMatcher):
            raise Untranslatable(f"'{name}' is a JSON matcher (probe events)")
        if isinstance(matcher, BlockMatcher):
            raise Untranslatable(f"'{name}' is a multi-line block matcher")
        if not isinstance(matcher, RegexMatcher):
            raise Untranslatable(f"'{name}' is a {matcher.kind.value} matcher")
        try:
            return logql_regex(matcher.regex)
        except Untranslatable as exc:
            raise Untranslatable(f"'{name}': {exc}") from None

    def condition(self, node: Condition, strict: bool = False) -> str:
        """`strict`: the exact condition (under a negation): no branch may be left out."""
        if isinstance(node, Name):
            return f"{self.vector(node.name)} > 0"
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, Or):
            return self.disjunction(node, strict)
        if isinstance(node, And):
            return self.conjunction(node, strict)
        if isinstance(node, Not):
            raise Untranslatable("a negation that is not part of an `and`")
        if isinstance(node, NOf):
            raise Untranslatable(f"'{node.needed} of (...)'")
        if isinstance(node, Where):
            raise Untranslatable("compares numbers captured from the lines")
        raise Untranslatable(f"a {type(node).__name__.lower()} node")

    def compare(self, node: Compare) -> str:
        left, right, op = node.left, node.right, node.op
        if isinstance(left, Num) and isinstance(right, Count):
            left, right, op = right, left, _FLIPPED[op]
        if isinstance(left, Count) and isinstance(right, Num):
            return f"{self.vector(left.name)} {op} {_number(right.number)}"
        if _reads_captures(node):
            raise Untranslatable("compares numbers captured from the lines")
        raise Untranslatable(
            "compares the counts of two matchers (a side with no lines has no series)"
        )

    def disjunction(self, node: Or, strict: bool) -> str:
        """Matchers named alone are merged into one line filter (one pass over the lines)."""
        patterns: list[str] = []
        parts: list[str] = []
        why: list[str] = []
        for item in node.items:
            try:
                if isinstance(item, Name):
                    patterns.append(self.pattern(item.name))
                else:
                    parts.append(self.condition(item, strict))
            except Untranslatable as exc:
                if strict:
                    raise
                why.append(str(exc))
        if len(patterns) == 1:
            parts.insert(0, f"{self.count_lines(patterns[0])} > 0")
        elif patterns:
            merged = "|".join(f"(?:{pattern})" for pattern in patterns)
            parts.insert(0, f"{self.count_lines(merged)} > 0")
        if not parts:
            raise Untranslatable("; ".join(dict.fromkeys(why)))
        self.left_out.extend(why)
        return parts[0] if len(parts) == 1 else " or ".join(f"({part})" for part in parts)

    def conjunction(self, node: And, strict: bool) -> str:
        positive = [item for item in node.items if not isinstance(item, Not)]
        negative = [item.item for item in node.items if isinstance(item, Not)]
        if not positive:
            raise Untranslatable("an `and` of negations only")
        expr = " and ".join(f"({self.condition(item, strict)})" for item in positive)
        for item in negative:
            expr = f"({expr}) unless ({self.condition(item, strict=True)})"
        return expr


def _reads_captures(node: Node) -> bool:
    return isinstance(node, Attr) or any(_reads_captures(child) for child in node.children())


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def export(
    rules: list[Rule],
    entries: Mapping[str, Mapping[str, Any]],
    *,
    selector: str = DEFAULT_SELECTOR,
    window: str = DEFAULT_WINDOW,
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY,
) -> LokiExport:
    """Every rule as a Loki alert, or the reason it is not one."""
    alerts, exported, not_exported = [], [], []
    for rule in sorted(rules, key=lambda r: r.id):
        translator = Translator(rule, selector, window, group_by)
        try:
            if rule.condition_tree is None:
                raise Untranslatable("its condition did not parse")
            expr = translator.condition(rule.condition_tree)
        except Untranslatable as exc:
            not_exported.append(NotExported(rule.id, rule.entry, str(exc)))
            continue
        left_out = tuple(dict.fromkeys(translator.left_out))
        exported.append(Exported(rule.id, rule.entry, expr, left_out))
        alerts.append(alert_rule(rule, entries.get(rule.entry, {}), expr, left_out))
    return LokiExport(tuple(alerts), tuple(exported), tuple(not_exported))


def alert_rule(
    rule: Rule, entry: Mapping[str, Any], expr: str, left_out: tuple[str, ...]
) -> AlertRule:
    annotations = {
        "summary": str(entry.get("title") or rule.title),
        "description": str(entry.get("quick_answer") or rule.title),
        "runbook_url": str(entry.get("url") or ""),
        "rule_title": rule.title,
    }
    if left_out:
        annotations["partial"] = "not in this alert: " + "; ".join(left_out)
    return AlertRule(
        alert=alert_name("trainwreck", rule.id),
        expr=expr,
        labels={
            "severity": str(entry.get("severity") or "unknown"),
            "entry": rule.entry,
            "rule": rule.id,
            "source": "trainwreck",
        },
        annotations=annotations,
    )
