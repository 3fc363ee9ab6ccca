"""What a diagnosis reports: a `Report` of a `Finding` per failure found, with its `Evidence`
lines, the `Measured` numbers its rules compared and the `Competing` hypotheses, the inputs `Skipped`, the `Suggestion`s made when no rule
fired and the `Stats` of the scan. Built by diagnose and read by every renderer (formats.py) and
by compile's regression check; `to_json` gives the report's JSON shape (its keys in their
documented order), so the JSON output does not depend on how the model is held."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

RankKey = Any  # an int rank, a host label ("node-2"), or None


def rank_json(rank: Any) -> Any:
    """A rank, or a list of ranks (initiating_rank: {missing_from} may name several), as JSON."""
    if isinstance(rank, (list, tuple)):
        return [rank_json(r) for r in rank]
    return rank


class FirstKey(NamedTuple):
    """Where a matcher first matched, as reports order it: by time, then input, then line."""

    t: float  # Unix time of the line; NaN without a timestamp
    file: int  # the input's position in the scan
    line: int

    def order(self) -> FirstKey:
        """The key lines are ordered by: a line without a time after every timed line."""
        return FirstKey(self.t if math.isfinite(self.t) else math.inf, self.file, self.line)


NEVER = FirstKey(math.inf, 1 << 30, 1 << 30)  # the order of a part that matched nothing


@dataclass(slots=True)
class Evidence:
    """One log line that supports a finding: recorded by the engine when a part of a rule
    matches it (its text read later for detector events, known at first only by position), and
    shown in the report with the rule's id before its part."""

    file: str  # the input's display name
    line: int
    text: str  # escaped and bounded (reading.evidence_text); "" until read
    rank: RankKey
    part: str  # the matcher or detector; "rule-id:part" in a finding
    t: float = math.nan  # Unix time of the line (NaN without a timestamp)
    offset: int = -1  # byte offset of the line in its (decompressed) input; -1: unknown
    file_id: int = -1  # the input's position in the scan

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "text": self.text,
            "rank": rank_json(self.rank),
            "part": self.part,
        }


@dataclass(frozen=True)
class Measured:
    """A number a rule's condition read from the log (a capture it compares), in the unit the
    engine normalised it to: bytes ("B"), milliseconds ("ms") or none ("")."""

    value: float
    unit: str = ""
    lines: int = 1  # how many matched lines gave a value
    largest: float | None = None  # when those values differ: the largest (value is the first)

    def shown(self) -> str:
        text = _with_unit(self.value, self.unit)
        if self.largest is not None and self.largest != self.value:
            text += f" (first of {self.lines}; largest {_with_unit(self.largest, self.unit)})"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "unit": self.unit,
            "lines": self.lines,
            "largest": self.largest,
        }


_SIZES = (("TiB", 1024.0**4), ("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0))


def _with_unit(value: float, unit: str) -> str:
    """A size in the largest binary unit it fills, a time in ms or s, a count as it is."""
    if unit == "B":
        for name, size in _SIZES:
            if abs(value) >= size:
                return f"{value / size:.2f} {name}"
        return f"{value:g} B"
    if unit == "ms":
        return f"{value / 1000:.2f} s" if abs(value) >= 10_000 else f"{value:g} ms"
    return f"{value:g}"


@dataclass(frozen=True)
class Competing:
    """Another finding of the same report, and why it ranks where it does against this one."""

    entry: str
    confidence: float
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry, "confidence": self.confidence, "why": self.why}


@dataclass(frozen=True)
class Finding:
    """One failure found: the entry, the rules that fired for it, how sure, which ranks, the
    evidence, and the entry's fix. `rank` and `competing` are set when the findings are ordered
    (diagnose.rank_findings); `first` orders findings of equal confidence and is not reported."""

    entry: str
    rule: str  # the most confident rule
    rules: tuple[str, ...]
    title: str  # the entry's title
    rule_title: str
    confidence: float
    ranks: tuple[RankKey, ...]
    initiating_rank: Any  # a rank, a list of ranks, or None
    evidence: tuple[Evidence, ...]
    root_cause: str
    fix: Mapping[str, Any]  # the entry's {title, steps}
    verify: tuple[str, ...]
    url: str
    why: tuple[str, ...]
    notes: tuple[str, ...]
    detectors: Mapping[str, Mapping[str, float | None]]  # "rule:detector" -> its outputs
    quick_answer: str = ""  # the entry's one-line answer: what it is and what to do first
    numbers: Mapping[str, Measured] = field(default_factory=dict)  # what the condition compared
    confirm: Mapping[str, str] = field(
        default_factory=dict
    )  # the entry's first check: check, code, expect
    first: FirstKey = field(default=FirstKey(math.inf, 0, 0), compare=False, repr=False)
    competing: tuple[Competing, ...] = ()
    rank: int = 0  # 1 = reported first

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "rule": self.rule,
            "rules": list(self.rules),
            "title": self.title,
            "quick_answer": self.quick_answer,
            "rule_title": self.rule_title,
            "confidence": self.confidence,
            "ranks": [rank_json(r) for r in self.ranks],
            "initiating_rank": rank_json(self.initiating_rank),
            "evidence": [item.to_json() for item in self.evidence],
            "numbers": {name: value.to_json() for name, value in self.numbers.items()},
            "root_cause": self.root_cause,
            "confirm": dict(self.confirm),
            "fix": self.fix,
            "verify": list(self.verify),
            "url": self.url,
            "why": list(self.why),
            "notes": list(self.notes),
            "detectors": self.detectors,
            "competing": [other.to_json() for other in self.competing],
            "rank": self.rank,
        }


@dataclass
class Skipped:
    """An input, or part of one, that was not read, and why (one line, shown as it is)."""

    file: str
    reason: str
    unread: bool = False  # nothing of the file could be read (diagnose exits 3 when all are)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "reason": self.reason}


@dataclass(frozen=True)
class Suggestion:
    """An entry whose own words are closest to an error line of a log no rule fired on."""

    entry: str
    score: float  # cosine similarity, rounded to 3 places
    line: str  # "file:line: text" of the closest error line
    shared: tuple[str, ...] = ()  # the words that weigh most in the similarity: the why

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "score": self.score,
            "line": self.line,
            "shared": list(self.shared),
        }


@dataclass(frozen=True)
class Stats:
    """What a diagnosis read, and how long it took."""

    files: int = 0
    lines: int = 0
    bytes: int = 0
    seconds: float = 0.0
    rules: int = 0
    rule_sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "lines": self.lines,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "rules": self.rules,
            "rule_sources": list(self.rule_sources),
        }


@dataclass
class Report:
    """A diagnosis: its findings in report order, and what it could not read."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    nothing_read: bool = False  # every input was unreadable (exit 3)
    suggestions: list[Suggestion] = field(default_factory=list)  # only when nothing fired

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [finding.to_json() for finding in self.findings],
            "suggestions": [suggestion.to_json() for suggestion in self.suggestions],
            "skipped": [item.to_json() for item in self.skipped],
            "stats": self.stats.to_json(),
        }

    @property
    def entries(self) -> list[str]:
        return [f.entry for f in self.findings]

    @property
    def rules(self) -> set[str]:
        return {rule for f in self.findings for rule in f.rules}
