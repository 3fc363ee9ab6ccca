"""The typed rule: what the engine, diagnose and explain read, built from the bundle's mapping.

A compiled bundle stores each rule as a plain mapping (the contract with installed rule packs);
`Rule.from_dict` reads one (KeyError, ValueError or TypeError when it is malformed) and
`Rule.to_dict` writes it back, key for key (tests/test_rules_typed.py round-trips every rule).
`normalise` builds a `Rule` from a rule file that the schema accepts; validation (rules/model.py)
then checks it. Matcher kinds are in rules/matchers.py, detector kinds and their settings in
rules/registry.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from trainwreck.rules import condition as cond
from trainwreck.rules import regexes
from trainwreck.rules.condition_nodes import Condition, from_json
from trainwreck.rules.matchers import MATCHERS, Matcher, matcher_from_yaml
from trainwreck.rules.registry import DETECTORS, EVENTS, DetectorKind, DetectorSettings


@dataclass(frozen=True)
class Series:
    """Points taken from matches: `value` (and `index`, else the position) of each match of its
    matchers, per rank."""

    matchers: tuple[str, ...]
    value: str
    index: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Series:
        return cls(tuple(data["matchers"]), str(data["value"]), data.get("index"))

    def to_dict(self) -> dict[str, Any]:
        return {"matchers": list(self.matchers), "value": self.value, "index": self.index}


@dataclass(frozen=True)
class Detector:
    settings: DetectorSettings

    @property
    def kind(self) -> str:
        return self.settings.kind

    @property
    def spec(self) -> DetectorKind:
        """Its row of the registry."""
        return DETECTORS[self.kind]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Detector:
        return cls(DETECTORS[data["kind"]].settings_type.from_dict(data))

    def to_dict(self) -> dict[str, Any]:
        return self.settings.to_dict()


class RankHow(str, Enum):
    """How a rule names the rank that started the failure (report.initiating_rank)."""

    FIRST = "first"  # the earliest line of the evidence parts
    NONE = "none"  # the rule cannot tell
    MATCHER = "matcher"  # the first line of a matcher
    DETECTOR = "detector"  # the rank a detector names
    MISSING_FROM = "missing_from"  # the rank that never reported a matcher

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class InitiatingRank:
    how: RankHow
    part: str | None = None  # the matcher or detector, for MATCHER, DETECTOR, MISSING_FROM

    @classmethod
    def from_dict(cls, data: Any) -> InitiatingRank:
        if isinstance(data, Mapping):
            ((how, part),) = data.items()
            return cls(RankHow(how), str(part))
        found = RankHow(data)
        if found not in (RankHow.FIRST, RankHow.NONE):
            raise ValueError(f"initiating_rank {data!r} names no part")
        return cls(found)

    def to_dict(self) -> Any:
        return self.how.value if self.part is None else {self.how.value: self.part}


@dataclass(frozen=True)
class ReportSpec:
    """What a fired rule reports: the parts whose lines are its evidence, in order, how many
    lines at most, and how it names the initiating rank."""

    evidence: tuple[str, ...]
    max_evidence: int
    initiating_rank: InitiatingRank

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportSpec:
        return cls(
            tuple(data["evidence"]),
            int(data["max_evidence"]),
            InitiatingRank.from_dict(data["initiating_rank"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidence": list(self.evidence),
            "max_evidence": self.max_evidence,
            "initiating_rank": self.initiating_rank.to_dict(),
        }


@dataclass(frozen=True)
class RuleTests:
    """The rule's regression logs: paths it must fire on, and paths it must not."""

    match: tuple[str, ...] = ()
    clean: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"match": list(self.match), "clean": list(self.clean)}


@dataclass(frozen=True, eq=False)
class Rule:
    id: str
    entry: str
    title: str
    description: str
    confidence: float
    boost: Mapping[str, float]  # part -> added confidence when the part holds
    matchers: Mapping[str, Matcher]
    series: Mapping[str, Series]
    detectors: Mapping[str, Detector]
    detector_order: tuple[str, ...]  # dependency order (cooccur after what it reads)
    condition: str  # as written
    condition_tree: Condition | None  # None: the rule never fires (it did not parse)
    report: ReportSpec
    fields: tuple[tuple[str, str], ...]  # (matcher, capture) the condition reads the values of
    source: str = ""
    tests: RuleTests = RuleTests()
    examples: tuple[Mapping[str, Any], ...] = ()  # shown to readers and run by compile

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        """A rule from the bundle's mapping; KeyError, ValueError or TypeError when malformed."""
        tree = data.get("condition_ast")
        condition = None if tree is None else from_json(tree)
        if condition is not None and not isinstance(condition, Condition):
            raise ValueError(f"not a condition: {tree!r}")
        tests = data.get("tests") or {}
        return cls(
            id=str(data["id"]),
            entry=str(data["entry"]),
            title=str(data["title"]),
            description=str(data.get("description", "")),
            confidence=float(data["confidence"]),
            boost={str(k): float(v) for k, v in data["boost"].items()},
            matchers={name: Matcher.from_dict(m) for name, m in data["matchers"].items()},
            series={name: Series.from_dict(s) for name, s in data["series"].items()},
            detectors={name: Detector.from_dict(d) for name, d in data["detectors"].items()},
            detector_order=tuple(data["detector_order"]),
            condition=str(data.get("condition", "")),
            condition_tree=condition,
            report=ReportSpec.from_dict(data["report"]),
            fields=tuple((str(part), str(name)) for part, name in data.get("fields", [])),
            source=str(data.get("source", "")),
            tests=RuleTests(tuple(tests.get("match", ())), tuple(tests.get("clean", ()))),
            examples=tuple(dict(e) for e in data.get("examples") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        """The compiled form stored in a bundle."""
        out: dict[str, Any] = {
            "id": self.id,
            "entry": self.entry,
            "title": self.title,
            "description": self.description,
            "confidence": self.confidence,
            "boost": dict(self.boost),
            "matchers": {name: m.to_dict() for name, m in self.matchers.items()},
            "series": {name: s.to_dict() for name, s in self.series.items()},
            "detectors": {name: d.to_dict() for name, d in self.detectors.items()},
            "detector_order": list(self.detector_order),
            "condition": self.condition,
            "source": self.source,
            "tests": self.tests.to_dict(),
            "examples": [dict(e) for e in self.examples],
        }
        if self.condition_tree is not None:
            out["condition_ast"] = self.condition_tree.to_json()
        out["report"] = self.report.to_dict()
        out["fields"] = [[part, name] for part, name in self.fields]
        return out

    def event_parts(self) -> set[str]:
        """The parts (matchers or detectors) that event detectors (cooccur) read."""
        return {
            part
            for detector in self.detectors.values()
            if detector.spec.inputs == EVENTS
            for part in detector.settings.references()
        }


def read_rules(
    items: Iterable[Mapping[str, Any]],
) -> tuple[list[Rule], list[tuple[str, Exception]]]:
    """The rules of a bundle, typed; and (its id or '?', the error) of each that cannot be read
    (a hand-edited or foreign pack), which the caller reports and skips."""
    rules: list[Rule] = []
    broken: list[tuple[str, Exception]] = []
    for item in items:
        try:
            rules.append(item if isinstance(item, Rule) else Rule.from_dict(item))
        except Exception as exc:  # anything in a foreign mapping: one bad rule, not the run
            name = item.get("id", "?") if isinstance(item, Mapping) else "?"
            broken.append((str(name), exc))
    return rules, broken


# --- from a rule file -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Normalised:
    """A rule file read into its typed rule, with what validation needs besides: each
    matcher's capture names (None where a pattern does not compile, or any field may exist) and
    the condition's parse error."""

    rule: Rule
    captures: Mapping[str, set[str] | None]
    condition_error: cond.ConditionError | None
    cycle: str | None  # a detector that depends on itself


def matcher_captures(matcher: Matcher) -> set[str] | None:
    """The capture names of a matcher's patterns; None when one does not compile (validation
    reports it) or when its kind takes its fields from the line (JSON)."""
    row = MATCHERS[matcher.kind]
    if not row.named_captures:
        return None
    if row.captures is not None:
        return set(row.captures)
    names: set[str] = set()
    for _, pattern in matcher.patterns():
        if regexes.compile_error(pattern):
            return None
        names.update(regexes.group_names(pattern))
    return names


class Scope:
    """The parts of one rule, for the condition parser (condition.Scope)."""

    def __init__(
        self,
        matchers: Mapping[str, Matcher],
        series: Mapping[str, Series],
        detectors: Mapping[str, Detector],
        captures: Mapping[str, set[str] | None],
    ):
        self.matchers, self.series, self.detectors = matchers, series, detectors
        self.captures = captures

    def kind(self, name: str) -> str | None:
        if name in self.matchers:
            return "matcher"
        if name in self.detectors:
            return "detector"
        if name in self.series:
            return "series"
        return None

    def field_problem(self, name: str, field_name: str) -> str | None:
        if name in self.matchers:
            known = self.captures.get(name)
            if known is None:  # JSON matcher: any field may exist
                return None
            if field_name in known:
                return None
            listing = ", ".join(sorted(known)) or "none"
            return f"matcher '{name}' has no capture '{field_name}' (captures: {listing})"
        kind = self.detectors[name].kind
        outputs = DETECTORS[kind].outputs
        if field_name in outputs:
            return None
        return (
            f"{kind} detector '{name}' has no output '{field_name}' (outputs: {', '.join(outputs)})"
        )


def normalise(data: Mapping[str, Any], source: str) -> Normalised:
    """The typed rule of a rule file's data (valid by the schema): defaults filled in, the
    condition parsed, the detectors ordered by dependency. Reports nothing: validation does."""
    matchers = {name: matcher_from_yaml(spec) for name, spec in data["matchers"].items()}
    captures = {name: matcher_captures(m) for name, m in matchers.items()}
    series = {}
    for name, spec in (data.get("series") or {}).items():
        names = spec["matcher"] if isinstance(spec["matcher"], list) else [spec["matcher"]]
        series[name] = Series(tuple(names), spec["value"], spec.get("index"))
    detectors = {}
    for name, spec in (data.get("detectors") or {}).items():
        kind, params = next(iter(spec.items()))
        detectors[name] = Detector(DETECTORS[kind].settings(params))
    order, cycle = detector_order(detectors)
    error = None
    try:
        tree: Condition | None
        tree, names = cond.parse(data["condition"], Scope(matchers, series, detectors, captures))
    except cond.ConditionError as exc:
        tree, names, error = None, set(), exc
    report_in = data.get("report") or {}
    evidence = report_in.get("evidence") or [n for n in matchers if n in names] or list(matchers)
    rule = Rule(
        id=data["id"],
        entry=data["entry"],
        title=data["title"],
        description=data["description"],
        confidence=float(data["confidence"]),
        boost={k: float(v) for k, v in (data.get("boost") or {}).items()},
        matchers=matchers,
        series=series,
        detectors=detectors,
        detector_order=tuple(order),
        condition=data["condition"],
        condition_tree=tree,
        report=ReportSpec(
            tuple(evidence),
            int(report_in.get("max_evidence", 8)),
            InitiatingRank.from_dict(report_in.get("initiating_rank", "first")),
        ),
        fields=tuple(
            sorted(
                (part, name)
                for part, name in (cond.referenced_fields(tree) if tree is not None else set())
                if part in matchers
            )
        ),
        source=source,
        tests=RuleTests(tuple(data["tests"]["match"]), tuple(data["tests"]["clean"])),
        examples=tuple(dict(example) for example in data.get("examples") or []),
    )
    return Normalised(rule, captures, error, cycle)


def detector_order(detectors: Mapping[str, Detector]) -> tuple[list[str], str | None]:
    """Detectors in dependency order (cooccur after the detectors it reads), and the first
    detector found to depend on itself (then the order is as written)."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> str | None:
        if state.get(name) == 2:
            return None
        if state.get(name) == 1:
            return name
        state[name] = 1
        detector = detectors[name]
        if detector.spec.inputs == EVENTS:
            for part in detector.settings.references():
                if part in detectors and part != name:
                    found = visit(part)
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
