"""Loading and validating rules (rules/*.yaml) into the normalised form the engine runs.

`load_rules(root)` returns every rule that is valid as a plain dict (the shape stored in the
compiled bundle) and a Problem, located at file:line:col, for everything wrong. Validation covers
the schema, the entry, the RE2 patterns, units, series, detectors, the condition and report
references. Running the regression logs is compile's job (it needs the engine).
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
    display_path,
    load_yaml,
    schema_problems,
)
from trainwreck.rules import condition as cond
from trainwreck.rules import regexes
from trainwreck.rules.registry import DETECTORS, EVENT_DETECTORS, EVENTS, RANK_DETECTORS
from trainwreck.rules.units import DECLARED_UNITS

SCHEMA = "rule.schema.json"
RESERVED = frozenset(cond.KEYWORDS)


@dataclass
class LoadedRules:
    rules: list[dict[str, Any]] = field(default_factory=list)
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
        problems, rule = validate_rule(
            document, source_text, path, root, check_entries=check_entries
        )
        if rule is not None:
            if rule["id"] in seen:
                problems.append(
                    document.problem(
                        ("id",), f"duplicate rule id '{rule['id']}' (also in {seen[rule['id']]})"
                    )
                )
                rule = None
            else:
                seen[rule["id"]] = display
        result.problems.extend(problems)
        if rule is not None and not any(p.severity == "error" for p in problems):
            result.rules.append(rule)
            result.documents[rule["id"]] = document
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


class _Scope:
    """The parts of one rule, for the condition parser."""

    def __init__(self, rule: dict[str, Any], captures: dict[str, set[str] | None]):
        self.rule = rule
        self.captures = captures

    def kind(self, name: str) -> str | None:
        if name in self.rule["matchers"]:
            return "matcher"
        if name in self.rule["detectors"]:
            return "detector"
        if name in self.rule["series"]:
            return "series"
        return None

    def field_problem(self, name: str, field_name: str) -> str | None:
        if name in self.rule["matchers"]:
            known = self.captures.get(name)
            if known is None:  # JSON matcher: any field may exist
                return None
            if field_name in known:
                return None
            listing = ", ".join(sorted(known)) or "none"
            return f"matcher '{name}' has no capture '{field_name}' (captures: {listing})"
        kind = self.rule["detectors"][name]["kind"]
        outputs = DETECTORS[kind].outputs
        if field_name in outputs:
            return None
        return (
            f"{kind} detector '{name}' has no output '{field_name}' (outputs: {', '.join(outputs)})"
        )


def validate_rule(
    document: Document,
    source_text: str,
    path: Path,
    root: Path,
    *,
    check_entries: bool = True,
) -> tuple[list[Problem], dict[str, Any] | None]:
    """Problems of one rule document, and its normalised form when it has none."""
    problems = schema_problems(document, SCHEMA, root)
    data = document.data
    if not isinstance(data, dict):
        return problems or [document.problem((), "a rule must be a mapping")], None
    if problems:
        return problems, None
    problem = document.problem

    rule_id = data["id"]
    if rule_id != path.stem:
        problems.append(problem(("id",), f"id '{rule_id}' must equal the file name '{path.stem}'"))
    if check_entries and not (root / "entries" / f"{data['entry']}.yaml").is_file():
        problems.append(
            problem(
                ("entry",), f"entry '{data['entry']}' does not exist (entries/{data['entry']}.yaml)"
            )
        )

    matchers_in = data["matchers"]
    series_in = data.get("series") or {}
    detectors_in = data.get("detectors") or {}
    # One namespace for all parts.
    owner: dict[str, str] = {}
    for section, items in (
        ("matchers", matchers_in),
        ("series", series_in),
        ("detectors", detectors_in),
    ):
        for name in items:
            if name in RESERVED:
                problems.append(problem((section, name), f"'{name}' is a reserved word", key=True))
            elif name in owner:
                problems.append(
                    problem(
                        (section, name), f"name '{name}' is already used in {owner[name]}", key=True
                    )
                )
            owner.setdefault(name, section)

    def check_pattern(where: tuple[Any, ...], pattern: str) -> set[str] | None:
        """The pattern's capture names, or None (after reporting) when RE2 cannot run it, so
        that no follow-on 'no such capture' errors pile up."""
        error = regexes.compile_error(pattern)
        if error:
            offset, message = error
            line, column = scalar_position(document, source_text, where, offset)
            problems.append(Problem(document.file, line, column, _fmt(where), message))
            return None
        return set(regexes.group_names(pattern))

    matchers: dict[str, dict[str, Any]] = {}
    captures: dict[str, set[str] | None] = {}
    for name, spec in matchers_in.items():
        base = ("matchers", name)
        out: dict[str, Any] = {}
        groups: set[str] | None
        if "regex" in spec:
            out = {"kind": "regex", "regex": spec["regex"]}
            groups = check_pattern((*base, "regex"), spec["regex"])
        elif "json" in spec:
            out = {"kind": "json", "json": dict(spec["json"])}
            groups = None
        else:
            block = spec["block"]
            out = {
                "kind": "block",
                "start": block["start"],
                "end": block["end"],
                "max_lines": int(block.get("max_lines", 200)),
                "capture": list(block.get("capture") or []),
            }
            found = [check_pattern((*base, "block", "start"), block["start"])]
            found.append(check_pattern((*base, "block", "end"), block["end"]))
            for index, pattern in enumerate(out["capture"]):
                found.append(check_pattern((*base, "block", "capture", index), pattern))
            groups = None if any(g is None for g in found) else set().union(*found)  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        for capture, unit in (spec.get("values") or {}).items():
            where = (*base, "values", capture)
            if groups is not None and capture not in groups:
                problems.append(
                    problem(
                        where, f"'{capture}' is not a named capture of matcher '{name}'", key=True
                    )
                )
            if isinstance(unit, dict):
                unit_capture = unit["unit_capture"]
                if groups is not None and unit_capture not in groups:
                    problems.append(
                        problem(
                            (*where, "unit_capture"),
                            f"'{unit_capture}' is not a named capture of matcher '{name}'",
                        )
                    )
                values[capture] = {"unit_capture": unit_capture, "default": unit.get("default")}
            else:
                if unit not in DECLARED_UNITS:
                    problems.append(problem(where, f"unknown unit '{unit}'"))
                values[capture] = unit
        out["values"] = values
        matchers[name] = out
        captures[name] = groups

    series: dict[str, dict[str, Any]] = {}
    for name, spec in series_in.items():
        base = ("series", name)
        names = spec["matcher"] if isinstance(spec["matcher"], list) else [spec["matcher"]]
        for index, matcher_name in enumerate(names):
            where = (
                (*base, "matcher", index)
                if isinstance(spec["matcher"], list)
                else (*base, "matcher")
            )
            if matcher_name not in matchers_in:
                problems.append(problem(where, f"unknown matcher '{matcher_name}'"))
                continue
            known = captures.get(matcher_name)
            for role in ("value", "index"):
                capture = spec.get(role)
                if capture and known is not None and capture not in known:
                    problems.append(
                        problem(
                            (*base, role), f"matcher '{matcher_name}' has no capture '{capture}'"
                        )
                    )
        series[name] = {"matchers": names, "value": spec["value"], "index": spec.get("index")}

    detectors: dict[str, dict[str, Any]] = {}
    for name, spec in detectors_in.items():
        kind, params = next(iter(spec.items()))
        base = ("detectors", name, kind)
        detector = DETECTORS[kind]
        settings = detector.settings(params)
        if detector.inputs != EVENTS:
            for role in detector.references:
                if settings[role] not in series_in:
                    problems.append(problem((*base, role), f"unknown series '{settings[role]}'"))
        else:
            for role in detector.references:
                part = settings[role]
                if part == name:
                    problems.append(problem((*base, role), "a detector cannot refer to itself"))
                elif part in matchers_in:
                    if settings["by"] == "step":
                        known = captures.get(part)
                        if known is not None and "step" not in known:
                            problems.append(
                                problem(
                                    (*base, role),
                                    f"by: step needs a 'step' capture in matcher '{part}'",
                                )
                            )
                elif part in detectors_in:
                    other = next(iter(detectors_in[part]))
                    if not DETECTORS[other].events:
                        problems.append(
                            problem(
                                (*base, role),
                                f"'{part}' is a {other} detector; {kind} takes matchers or {', '.join(EVENT_DETECTORS)} detectors",
                            )
                        )
                else:
                    problems.append(problem((*base, role), f"unknown part '{part}'"))
        detectors[name] = settings

    order, cycle = _detector_order(detectors)
    if cycle:
        problems.append(
            problem(("detectors", cycle), f"detector '{cycle}' depends on itself through cooccur")
        )

    rule: dict[str, Any] = {
        "id": rule_id,
        "entry": data["entry"],
        "title": data["title"],
        "description": data["description"],
        "confidence": float(data["confidence"]),
        "boost": {k: float(v) for k, v in (data.get("boost") or {}).items()},
        "matchers": matchers,
        "series": series,
        "detectors": detectors,
        "detector_order": order,
        "condition": data["condition"],
        "source": document.file,
        "tests": {"match": list(data["tests"]["match"]), "clean": list(data["tests"]["clean"])},
        "examples": [dict(example) for example in data.get("examples") or []],
    }
    for index, example in enumerate(rule["examples"]):
        if example.get("matcher") is not None and example["matcher"] not in matchers:
            problems.append(
                problem(("examples", index, "matcher"), f"unknown matcher '{example['matcher']}'")
            )
    for part in rule["boost"]:
        if part not in matchers and part not in detectors:
            problems.append(problem(("boost", part), f"unknown part '{part}'", key=True))

    try:
        tree: cond.Condition | None
        tree, names = cond.parse(data["condition"], _Scope(rule, captures))
        rule["condition_ast"] = tree.to_json()  # the bundle stores the tree's JSON form
    except cond.ConditionError as exc:
        line, column = scalar_position(document, source_text, ("condition",), exc.offset)
        problems.append(Problem(document.file, line, column, "condition", exc.message))
        tree, names = None, set()

    report_in = data.get("report") or {}
    evidence = list(
        report_in.get("evidence") or [n for n in matchers if n in names] or list(matchers)
    )
    for index, part in enumerate(report_in.get("evidence") or []):
        if part not in matchers and part not in detectors:
            problems.append(problem(("report", "evidence", index), f"unknown part '{part}'"))
    initiating = report_in.get("initiating_rank", "first")
    if isinstance(initiating, dict):
        ((how, part),) = initiating.items()
        pool = detectors if how == "detector" else matchers
        if part not in pool:
            kind_name = "detector" if how == "detector" else "matcher"
            problems.append(
                problem(("report", "initiating_rank", how), f"unknown {kind_name} '{part}'")
            )
        elif how == "detector" and not DETECTORS[detectors[part]["kind"]].names_rank:
            problems.append(
                problem(
                    ("report", "initiating_rank", how),
                    f"a {detectors[part]['kind']} detector names no rank; use {', '.join(RANK_DETECTORS)}",
                )
            )
    rule["report"] = {
        "evidence": evidence,
        "max_evidence": int(report_in.get("max_evidence", 8)),
        "initiating_rank": initiating,
    }
    rule["fields"] = sorted(
        [part, name]
        for part, name in (cond.referenced_fields(tree) if tree is not None else set())
        if part in matchers
    )
    return problems, (rule if not problems else None)


def _detector_order(detectors: dict[str, dict[str, Any]]) -> tuple[list[str], str | None]:
    """Detectors in dependency order (cooccur after the detectors it reads)."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> str | None:
        if state.get(name) == 2:
            return None
        if state.get(name) == 1:
            return name
        state[name] = 1
        spec = detectors[name]
        detector = DETECTORS[spec["kind"]]
        if detector.inputs == EVENTS:
            for role in detector.references:
                if spec[role] in detectors and spec[role] != name:
                    found = visit(spec[role])
                    if found:
                        return found
        state[name] = 2
        order.append(name)
        return None

    for name in detectors:
        cycle = visit(name)
        if cycle:
            return list(detectors), cycle
    return order, None


def _fmt(path: Iterable[Any]) -> str:
    from trainwreck.model import format_path

    return format_path(tuple(path))
