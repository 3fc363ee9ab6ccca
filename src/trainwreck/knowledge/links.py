"""Entry <-> rule links, judged in one place for `check` (entry side) and `compile` (rule side).

An entry lists the rules that detect it in `fingerprint.rules`; a rule names the entry it
diagnoses in `entry`. Both must agree: an entry may only list rules that exist and diagnose it
(an error at the entry), and a rule should be listed by its entry (a warning at the rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainwreck.model import Document, Entry, Problem


@dataclass(frozen=True)
class RuleLink:
    """What a rule file says about its entry, read without validating the rest of the rule
    (a rule broken elsewhere still exists for the entry that lists it)."""

    id: str
    entry: str | None  # None when `entry` is missing or not a string
    document: Document


def fingerprint_rules(data: Mapping[str, Any]) -> list[Any]:
    """An entry's `fingerprint.rules` as written ([] when missing or malformed)."""
    fingerprint = data.get("fingerprint")
    rules = fingerprint.get("rules") if isinstance(fingerprint, dict) else None
    return rules if isinstance(rules, list) else []


def entry_side_problems(entries: Iterable[Entry], rules: Mapping[str, RuleLink]) -> list[Problem]:
    """fingerprint.rules must name rules that exist in rules/ and diagnose this entry."""
    problems = []
    for entry in entries:
        for index, rule_id in enumerate(fingerprint_rules(entry.data)):
            if not isinstance(rule_id, str):
                continue
            where = ("fingerprint", "rules", index)
            link = rules.get(rule_id)
            if link is None:
                problems.append(
                    entry.document.problem(where, f"rule '{rule_id}' does not exist in rules/")
                )
            elif link.entry != entry.id:
                problems.append(
                    entry.document.problem(
                        where, f"rule '{rule_id}' diagnoses '{link.entry}', not this entry"
                    )
                )
    return problems


def rule_side_problems(rules: Iterable[RuleLink], entries: Mapping[str, Entry]) -> list[Problem]:
    """A rule whose entry exists should be listed in that entry's fingerprint.rules (a warning:
    the rule still works, but the entry page would not show it). A missing entry is the rule
    validator's error, not reported here."""
    problems = []
    for link in rules:
        entry = entries.get(link.entry) if link.entry is not None else None
        if entry is None or link.id in fingerprint_rules(entry.data):
            continue
        problems.append(
            link.document.problem(
                ("entry",),
                f"entry '{link.entry}' does not list this rule in fingerprint.rules",
                severity="warning",
            )
        )
    return problems
