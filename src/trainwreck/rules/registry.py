"""The detector registry: everything the toolkit knows about each kind of detector, in one table.

Rule validation (rules/model.py) and evaluation (engine/evaluation.py) iterate over it, and
tests/test_rules_registry.py checks it against schemas/rule.schema.json (kinds, parameter names,
defaults, outputs) and against the engine's detector functions, so the schema, the validator and
the engine cannot drift apart.

Adding a detector: write its function in engine/detectors.py (the series of every rank and the
settings in, a `DetectorResult` out) and list it in that module's FUNCTIONS, register a
`DetectorKind` below, and describe its settings in the schema's `detectors` section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# What a detector reads: one series (`series`), two series paired by rank and index (`series`
# and `with`), or the point events of two parts, matchers or event detectors (`a` and `b`).
SERIES = "series"
SERIES_PAIR = "series_pair"
EVENTS = "events"


@dataclass(frozen=True)
class DetectorKind:
    kind: str
    inputs: str  # SERIES, SERIES_PAIR or EVENTS
    references: tuple[str, ...]  # parameters naming a series (SERIES*) or a part (EVENTS)
    defaults: Mapping[str, Any]  # optional parameters and their defaults
    required: tuple[str, ...]  # parameters without a default that a rule may or must set
    outputs: tuple[str, ...]  # usable in conditions as name.output
    names_rank: bool = False  # its result names one rank (report.initiating_rank: {detector})
    events: bool = False  # its results are point events, usable as a cooccur part

    @property
    def parameters(self) -> tuple[str, ...]:
        return (*self.references, *self.required, *self.defaults)

    def settings(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """A rule's parameters over the defaults, with the kind (the compiled form)."""
        settings = {**self.defaults, **(params or {})}
        settings["kind"] = self.kind
        return settings


def _table(*kinds: DetectorKind) -> Mapping[str, DetectorKind]:
    return MappingProxyType({kind.kind: kind for kind in kinds})


DETECTORS: Mapping[str, DetectorKind] = _table(
    DetectorKind(
        "periodic_stalls",
        SERIES,
        ("series",),
        {
            "min_ratio": 1.2,
            "min_mad": 6.0,
            "min_excess": 0.0,
            "min_count": 3,
            "aligned_ranks": "all",
            "step_tolerance": 1,
            "max_interval_cv": 0.6,
            "min_points": 20,
            "warmup": 3,
        },
        (),
        (
            "count",
            "ratio",
            "median",
            "mad",
            "spike",
            "interval",
            "interval_s",
            "interval_cv",
            "ranks",
        ),
        events=True,
    ),
    DetectorKind(
        "drift",
        SERIES,
        ("series",),
        {"min_increase": 0.15, "min_delta": 0.0, "peers": True, "min_points": 6},
        (),
        ("count", "increase", "delta", "rank"),
        names_rank=True,
    ),
    DetectorKind(
        "rank_outlier",
        SERIES,
        ("series",),
        {"min_mad": 5.0, "min_ratio": 1.1, "below": False},
        (),
        ("count", "rank", "ratio"),
        names_rank=True,
    ),
    DetectorKind(
        "threshold",
        SERIES,
        ("series",),
        {"min_count": 1},
        ("above", "below"),
        ("count", "max", "min", "rank"),
        names_rank=True,
        events=True,
    ),
    DetectorKind(
        "cooccur",
        EVENTS,
        ("a", "b"),
        {"by": "time", "same_rank": False, "min_count": 1, "min_fraction": 0.0},
        ("window",),
        ("count", "fraction"),
    ),
    DetectorKind(
        "correlation",
        SERIES_PAIR,
        ("series", "with"),
        {"min_r": 0.5, "min_points": 10},
        (),
        ("r", "count"),
    ),
    DetectorKind(
        "jump",
        SERIES,
        ("series",),
        {
            "direction": "up",
            "min_ratio": 3.0,
            "min_delta": 0.0,
            "window": 20,
            "min_history": 5,
            "min_count": 1,
        },
        (),
        ("count", "ratio", "index", "rank"),
        names_rank=True,
        events=True,
    ),
)

EVENT_DETECTORS = tuple(kind for kind, spec in DETECTORS.items() if spec.events)
RANK_DETECTORS = tuple(kind for kind, spec in DETECTORS.items() if spec.names_rank)
