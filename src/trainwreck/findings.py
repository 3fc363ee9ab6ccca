"""What a diagnosis reports: a `Finding` per failure found, with its `Evidence` lines and the
`Competing` hypotheses. Built by diagnose.build_findings and read by every renderer (text,
Markdown, JSON) and by compile's regression check; `to_json` gives the report's JSON shape (its
keys in their documented order), so the JSON output does not depend on how the model is held."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RankKey = Any  # an int rank, a host label ("node-2"), or None


def rank_json(rank: Any) -> Any:
    """A rank, or a list of ranks (initiating_rank: {missing_from} may name several), as JSON."""
    if isinstance(rank, (list, tuple)):
        return [rank_json(r) for r in rank]
    return rank


@dataclass(frozen=True)
class Evidence:
    """One log line that supports a finding."""

    file: str  # the input's display name
    line: int
    text: str  # escaped and bounded (reading.evidence_text)
    rank: RankKey
    part: str  # "rule-id:matcher-or-detector"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "text": self.text,
            "rank": rank_json(self.rank),
            "part": self.part,
        }


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
    first: tuple[float, int, int] = field(default=(math.inf, 0, 0), compare=False, repr=False)
    competing: tuple[Competing, ...] = ()
    rank: int = 0  # 1 = reported first

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "rule": self.rule,
            "rules": list(self.rules),
            "title": self.title,
            "rule_title": self.rule_title,
            "confidence": self.confidence,
            "ranks": [rank_json(r) for r in self.ranks],
            "initiating_rank": rank_json(self.initiating_rank),
            "evidence": [item.to_json() for item in self.evidence],
            "root_cause": self.root_cause,
            "fix": self.fix,
            "verify": list(self.verify),
            "url": self.url,
            "why": list(self.why),
            "notes": list(self.notes),
            "detectors": self.detectors,
            "competing": [other.to_json() for other in self.competing],
            "rank": self.rank,
        }
