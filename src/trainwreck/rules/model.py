"""Loading and validating rules (rules/*.yaml) into the typed rule the engine runs.

`load_rules(root)` returns every rule that is valid, in the compiled form stored in the bundle
(`Rule.to_dict`), and a Problem, located at file:line:col, for everything wrong. A rule file is
checked against the schema, normalised into its typed `Rule` (rules/rule.py: defaults filled in,
the condition parsed), then validated: the entry, the RE2 patterns, units, series, detectors,
the condition and report references, every problem collected with its location. Running the
regression logs is compile's job (it needs the engine).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck.model import (
    Document,
    DocumentError,
    Problem,
    Severity,
    display_path,
    load_yaml,
    schema_problems,
)
from trainwreck.placeholders import placeholder_lines
from trainwreck.rules import condition as cond
from trainwreck.rules import regexes
from trainwreck.rules.matchers import MATCHERS, UnitCapture
from trainwreck.rules.registry import DETECTORS, EVENT_DETECTORS, EVENTS, RANK_DETECTORS
from trainwreck.rules.rule import Normalised, RankHow, Rule, normalise
from trainwreck.rules.units import DECLARED_UNITS

SCHEMA = "rule.schema.json"
RESERVED = frozenset(cond.KEYWORDS)


@dataclass
class LoadedRules:
    rules: list[dict[str, Any]] = field(default_factory=list)  # the compiled form
    problems: list[Problem] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    documents: dict[str, Document] = field(default_factory=dict)


def rule_files(rules_dir: Path) -> list[Path]:
    return sorted(p for p in rules_dir.glob("*.yaml") if p.is_file())


def load_rules(
    root: Path,
    rules_dir: Path | None = None,
    *,
    check_entries: bool = True,
) -> LoadedRules:
    """Every rule under `rules_dir` (default root/rules), validated and normalised."""
    rules_dir = rules_dir or root / "rules"
    result = LoadedRules(files=rule_files(rules_dir))
    seen: dict[str, str] = {}
    for path in result.files:
        display = display_path(path, root)
        try:
            document = load_yaml(path, display)
        except DocumentError as exc:
            result.problems.append(exc.problem)
            continue
        try:
            source_text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            source_text = ""
        unfinished = placeholder_lines(source_text)
        if unfinished:
            # A half-written rule (`trainwreck new`) holds up nothing: one warning, no rule.
            result.problems.append(
                Problem(
                    display,
                    unfinished[0],
                    1,
                    "",
                    f"rule not finished: {len(unfinished)} line(s) still say TODO; "
                    "it is left out of the bundle until they are filled",
                    Severity.WARNING,
                )
            )
            continue
        problems, rule = validate_rule(
            document, source_text, path, root, check_entries=check_entries
        )
        if rule is not None:
            if rule.id in seen:
                problems.append(
                    document.problem(
                        ("id",), f"duplicate rule id '{rule.id}' (also in {seen[rule.id]})"
                    )
                )
                rule = None
            else:
                seen[rule.id] = display
        result.problems.extend(problems)
        if rule is not None and not any(p.severity == Severity.ERROR for p in problems):
            result.rules.append(rule.to_dict())
            result.documents[rule.id] = document
    result.problems.sort()
    return result


def scalar_position(
    document: Document, source_text: str, path: tuple[Any, ...], offset: int
) -> tuple[int, int]:
    """Line and column of character `offset` inside the string scalar at `path`."""
    line, column = document.position(path)
    lines = source_text.splitlines()
    if not (1 <= line <= len(lines)):
        return line, column
    text = lines[line - 1]
    first = text[column - 1 : column] if column - 1 < len(text) else ""
    if first in ("'", '"'):
        return line, column + 1 + offset
    if first in ("|", ">"):
        # Block scalar: content lines follow, indented; find the line holding `offset`.
        remaining = offset
        for number in range(line + 1, len(lines) + 1):
            content = lines[number - 1]
            if not content.strip():
                remaining -= 1
                continue
            indent = len(content) - len(content.lstrip())
            body = content[indent:]
            if remaining <= len(body):
                return number, indent + 1 + max(remaining, 0)
            remaining -= len(body) + 1
        return line, column
    return line, column + offset


def validate_rule(
    document: Document,
    source_text: str,
    path: Path,
    root: Path,
    *,
    check_entries: bool = True,
) -> tuple[list[Problem], Rule | None]:
    """Problems of one rule document, and its typed rule when it has none."""
    problems = schema_problems(document, SCHEMA, root)
    data = document.data
    if not isinstance(data, dict):
        return problems or [document.problem((), "a rule must be a mapping")], None
    if problems:
        return problems, None
    read = normalise(data, document.file)
    checks = _Checks(document, source_text, data, read)
    checks.identity(path, root, check_entries)
    checks.names()
    checks.matchers()
    checks.series()
    checks.detectors()
    checks.references()
    checks.condition()
    checks.report()
    return checks.problems, (read.rule if not checks.problems else None)


class _Checks:
    """Validation of one normalised rule: each method checks one part and collects every
    problem it finds, located in the rule file."""

    def __init__(
        self, document: Document, source_text: str, data: dict[str, Any], read: Normalised
    ):
        self.document = document
        self.source_text = source_text
        self.data = data
        self.rule = read.rule
        self.read = read
        self.problems: list[Problem] = []

    def problem(self, where: tuple[Any, ...], message: str, *, key: bool = False) -> None:
        self.problems.append(self.document.problem(where, message, key=key))

    def at_offset(self, where: tuple[Any, ...], offset: int, message: str, path: str) -> None:
        line, column = scalar_position(self.document, self.source_text, where, offset)
        self.problems.append(Problem(self.document.file, line, column, path, message))

    def names(self) -> None:
        """One namespace for all parts, and no reserved word among them."""
        owner: dict[str, str] = {}
        for section in ("matchers", "series", "detectors"):
            for name in self.data.get(section) or {}:
                if name in RESERVED:
                    self.problem((section, name), f"'{name}' is a reserved word", key=True)
                elif name in owner:
                    self.problem(
                        (section, name), f"name '{name}' is already used in {owner[name]}", key=True
                    )
                owner.setdefault(name, section)

    def identity(self, path: Path, root: Path, check_entries: bool) -> None:
        rule = self.rule
        if rule.id != path.stem:
            self.problem(("id",), f"id '{rule.id}' must equal the file name '{path.stem}'")
        if check_entries and not (root / "entries" / f"{rule.entry}.yaml").is_file():
            self.problem(
                ("entry",), f"entry '{rule.entry}' does not exist (entries/{rule.entry}.yaml)"
            )

    def matchers(self) -> None:
        """Every pattern compiles under RE2; values name captures and known units."""
        for name, matcher in self.rule.matchers.items():
            base = ("matchers", name)
            row = MATCHERS[matcher.kind]
            paths = row.pattern_paths(matcher)
            # (a kind whose patterns are the language's own, a traceback's, places none)
            for where, (_, pattern) in zip(paths, matcher.patterns() if paths else (), strict=True):
                error = regexes.compile_error(pattern)
                if error:
                    offset, message = error
                    self.at_offset((*base, *where), offset, message, _fmt((*base, *where)))
            if row.problems is not None:
                for where, message in row.problems(matcher):
                    self.problem((*base, *where), message)
            groups = self.read.captures[name]
            for capture, unit in matcher.values.items():
                where = (*base, "values", capture)
                if groups is not None and capture not in groups:
                    self.problem(
                        where, f"'{capture}' is not a named capture of matcher '{name}'", key=True
                    )
                if isinstance(unit, UnitCapture):
                    if groups is not None and unit.unit_capture not in groups:
                        self.problem(
                            (*where, "unit_capture"),
                            f"'{unit.unit_capture}' is not a named capture of matcher '{name}'",
                        )
                elif unit not in DECLARED_UNITS:
                    self.problem(where, f"unknown unit '{unit}'")

    def series(self) -> None:
        """A series' matchers exist and capture its value and index."""
        for name, spec in (self.data.get("series") or {}).items():
            base = ("series", name)
            series = self.rule.series[name]
            listed = isinstance(spec["matcher"], list)
            for index, matcher_name in enumerate(series.matchers):
                where = (*base, "matcher", index) if listed else (*base, "matcher")
                if matcher_name not in self.rule.matchers:
                    self.problem(where, f"unknown matcher '{matcher_name}'")
                    continue
                known = self.read.captures.get(matcher_name)
                for role, capture in (("value", series.value), ("index", series.index)):
                    if capture and known is not None and capture not in known:
                        self.problem(
                            (*base, role), f"matcher '{matcher_name}' has no capture '{capture}'"
                        )

    def detectors(self) -> None:
        """A detector reads series that exist, or (cooccur) matchers and event detectors; no
        detector depends on itself."""
        rule = self.rule
        for name, detector in rule.detectors.items():
            kind = detector.kind
            base = ("detectors", name, kind)
            roles = detector.spec.references
            parts = detector.settings.references()
            if detector.spec.inputs != EVENTS:
                for role, part in zip(roles, parts, strict=True):
                    if part not in rule.series:
                        self.problem((*base, role), f"unknown series '{part}'")
                continue
            for role, part in zip(roles, parts, strict=True):
                if part == name:
                    self.problem((*base, role), "a detector cannot refer to itself")
                elif part in rule.matchers:
                    if getattr(detector.settings, "by", None) == "step":
                        known = self.read.captures.get(part)
                        if known is not None and "step" not in known:
                            self.problem(
                                (*base, role),
                                f"by: step needs a 'step' capture in matcher '{part}'",
                            )
                elif part in rule.detectors:
                    other = rule.detectors[part].kind
                    if not DETECTORS[other].events:
                        self.problem(
                            (*base, role),
                            f"'{part}' is a {other} detector; {kind} takes matchers or {', '.join(EVENT_DETECTORS)} detectors",
                        )
                else:
                    self.problem((*base, role), f"unknown part '{part}'")
        if self.read.cycle:
            cycle = self.read.cycle
            self.problem(
                ("detectors", cycle), f"detector '{cycle}' depends on itself through cooccur"
            )

    def references(self) -> None:
        """Examples and boosts name parts that exist."""
        rule = self.rule
        for index, example in enumerate(rule.examples):
            if example.get("matcher") is not None and example["matcher"] not in rule.matchers:
                self.problem(
                    ("examples", index, "matcher"), f"unknown matcher '{example['matcher']}'"
                )
        for part in rule.boost:
            if part not in rule.matchers and part not in rule.detectors:
                self.problem(("boost", part), f"unknown part '{part}'", key=True)

    def condition(self) -> None:
        error = self.read.condition_error
        if error is not None:
            self.at_offset(("condition",), error.offset, error.message, "condition")

    def report(self) -> None:
        """Evidence parts exist; the initiating rank names a matcher, or a detector that names
        a rank."""
        rule = self.rule
        report_in = self.data.get("report") or {}
        for index, part in enumerate(report_in.get("evidence") or []):
            if part not in rule.matchers and part not in rule.detectors:
                self.problem(("report", "evidence", index), f"unknown part '{part}'")
        initiating = rule.report.initiating_rank
        if initiating.part is None:
            return
        how, part = initiating.how, initiating.part
        where = ("report", "initiating_rank", how.value)
        if how == RankHow.DETECTOR:
            if part not in rule.detectors:
                self.problem(where, f"unknown detector '{part}'")
            elif not rule.detectors[part].spec.names_rank:
                kind = rule.detectors[part].kind
                self.problem(
                    where, f"a {kind} detector names no rank; use {', '.join(RANK_DETECTORS)}"
                )
        elif part not in rule.matchers:
            self.problem(where, f"unknown matcher '{part}'")


def _fmt(path: Iterable[Any]) -> str:
    from trainwreck.model import format_path

    return format_path(tuple(path))
