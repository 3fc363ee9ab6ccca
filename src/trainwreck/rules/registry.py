"""The detector registry: everything the toolkit knows about each kind of detector, in one table.

Each kind has a row (`DetectorKind`) and a typed settings class (a frozen dataclass below): the
class's fields are the kind's parameters, their defaults the defaults a rule gets, and a field
marked `_reference()` names the series or parts the detector reads. Rule validation
(rules/model.py) and evaluation (engine/evaluation.py) iterate over the table, and
tests/test_rules_registry.py checks it against schemas/rule.schema.json (kinds, parameter names,
defaults, outputs) and against the engine's detector functions, so the schema, the validator and
the engine cannot drift apart.

Adding a detector: write its function in engine/detectors.py (the series of every rank and its
settings in, a `DetectorResult` out) and list it in that module's FUNCTIONS, write its settings
class and register a `DetectorKind` below, and describe its settings in the schema's `detectors`
section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar


class DetectorInputs(str, Enum):
    """What a detector reads: one series (`series`), two series paired by rank and index
    (`series` and `with`), or the point events of two parts, matchers or event detectors (`a`
    and `b`)."""

    SERIES = "series"
    SERIES_PAIR = "series_pair"
    EVENTS = "events"

    def __str__(self) -> str:
        return self.value


SERIES = DetectorInputs.SERIES
SERIES_PAIR = DetectorInputs.SERIES_PAIR
EVENTS = DetectorInputs.EVENTS

_KEY = "key"  # field metadata: the parameter's name where it is not a Python name ("with")
_ROLE = "role"  # "reference": names a series or a part; "optional": no default, left out unset
_ABSENT = "absent"  # the value when a compiled bundle lacks it (it predates the parameter)

S = TypeVar("S", bound="DetectorSettings")


def _reference(key: str | None = None) -> Any:
    metadata = {_ROLE: "reference"} | ({_KEY: key} if key else {})
    return dataclasses.field(metadata=metadata)


def _optional() -> Any:
    return dataclasses.field(default=None, metadata={_ROLE: "optional"})


@dataclass(frozen=True)
class DetectorSettings:
    """A detector's settings, as a rule sets them over the defaults. Values keep the type the
    rule wrote (3, not 3.0), so the bundle's mapping round-trips."""

    kind: ClassVar[str]

    @classmethod
    def parameters(cls) -> tuple[tuple[str, dataclasses.Field[Any]], ...]:
        """(parameter name, field) in field order."""
        return tuple((f.metadata.get(_KEY, f.name), f) for f in dataclasses.fields(cls))

    @classmethod
    def from_params(cls: type[S], params: Mapping[str, Any] | None) -> S:
        """A rule's parameters (YAML), the defaults for those it leaves out."""
        given = params or {}
        return cls(**{f.name: given[key] for key, f in cls.parameters() if key in given})

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        """The compiled form (a bundle's mapping): every parameter is there, but for those left
        out unset and those a bundle may predate. KeyError for a missing one."""
        values: dict[str, Any] = {}
        for key, f in cls.parameters():
            if key in data:
                values[f.name] = data[key]
            elif _ABSENT in f.metadata:
                values[f.name] = f.metadata[_ABSENT]
            elif f.metadata.get(_ROLE) != "optional":
                raise KeyError(key)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The compiled form, with the kind (an unset optional parameter is left out)."""
        out = {
            key: getattr(self, f.name)
            for key, f in self.parameters()
            if not (f.metadata.get(_ROLE) == "optional" and getattr(self, f.name) is None)
        }
        out["kind"] = self.kind
        return out

    def references(self) -> tuple[str, ...]:
        """The names of the series (or parts) it reads, in the order of its reference
        parameters."""
        return tuple(
            getattr(self, f.name)
            for _, f in self.parameters()
            if f.metadata.get(_ROLE) == "reference"
        )


@dataclass(frozen=True)
class PeriodicStalls(DetectorSettings):
    kind: ClassVar[str] = "periodic_stalls"
    series: str = _reference()
    min_ratio: float = 1.2
    min_mad: float = 6.0
    min_excess: float = 0.0
    min_count: int = 3
    aligned_ranks: str | int = "all"  # "all", "any" or a number of ranks
    step_tolerance: int = 1
    max_interval_cv: float = 0.6
    min_points: int = 20
    warmup: int = dataclasses.field(default=3, metadata={_ABSENT: 0})


@dataclass(frozen=True)
class Drift(DetectorSettings):
    kind: ClassVar[str] = "drift"
    series: str = _reference()
    min_increase: float = 0.15
    min_delta: float = 0.0
    peers: bool = True
    min_points: int = 6


@dataclass(frozen=True)
class RankOutlier(DetectorSettings):
    kind: ClassVar[str] = "rank_outlier"
    series: str = _reference()
    min_mad: float = 5.0
    min_ratio: float = 1.1
    below: bool = False


@dataclass(frozen=True)
class Threshold(DetectorSettings):
    kind: ClassVar[str] = "threshold"
    series: str = _reference()
    min_count: int = 1
    above: float | None = _optional()
    below: float | None = _optional()


@dataclass(frozen=True)
class Cooccur(DetectorSettings):
    kind: ClassVar[str] = "cooccur"
    a: str = _reference()
    b: str = _reference()
    window: float = dataclasses.field()  # no default: a rule sets it
    by: str = "time"  # time, step or line
    same_rank: bool = False
    min_count: int = 1
    min_fraction: float = 0.0


@dataclass(frozen=True)
class Correlation(DetectorSettings):
    kind: ClassVar[str] = "correlation"
    series: str = _reference()
    with_: str = _reference("with")
    min_r: float = 0.5
    min_points: int = 10


@dataclass(frozen=True)
class Jump(DetectorSettings):
    kind: ClassVar[str] = "jump"
    series: str = _reference()
    direction: str = "up"  # up, down or both
    min_ratio: float = 3.0
    min_delta: float = 0.0
    window: int = 20
    min_history: int = 5
    min_count: int = 1


@dataclass(frozen=True)
class DetectorKind:
    kind: str
    inputs: DetectorInputs
    settings_type: type[DetectorSettings]
    outputs: tuple[str, ...]  # usable in conditions as name.output
    names_rank: bool = False  # its result names one rank (report.initiating_rank: {detector})
    events: bool = False  # its results are point events, usable as a cooccur part

    @property
    def references(self) -> tuple[str, ...]:
        """Parameters naming a series (SERIES*) or a part (EVENTS)."""
        return tuple(
            key
            for key, f in self.settings_type.parameters()
            if f.metadata.get(_ROLE) == "reference"
        )

    @property
    def defaults(self) -> Mapping[str, Any]:
        """Optional parameters and their defaults."""
        return MappingProxyType(
            {
                key: f.default
                for key, f in self.settings_type.parameters()
                if f.default is not dataclasses.MISSING and f.metadata.get(_ROLE) != "optional"
            }
        )

    @property
    def required(self) -> tuple[str, ...]:
        """Parameters without a default that a rule may or must set."""
        return tuple(
            key
            for key, f in self.settings_type.parameters()
            if f.metadata.get(_ROLE) != "reference" and key not in self.defaults
        )

    @property
    def parameters(self) -> tuple[str, ...]:
        return (*self.references, *self.required, *self.defaults)

    def settings(self, params: Mapping[str, Any] | None) -> DetectorSettings:
        """A rule's parameters over the defaults (TypeError when one it must set is missing)."""
        return self.settings_type.from_params(params)


def _table(*kinds: DetectorKind) -> Mapping[str, DetectorKind]:
    for row in kinds:
        assert row.kind == row.settings_type.kind, row.kind
    return MappingProxyType({kind.kind: kind for kind in kinds})


DETECTORS: Mapping[str, DetectorKind] = _table(
    DetectorKind(
        "periodic_stalls",
        SERIES,
        PeriodicStalls,
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
    DetectorKind("drift", SERIES, Drift, ("count", "increase", "delta", "rank"), names_rank=True),
    DetectorKind("rank_outlier", SERIES, RankOutlier, ("count", "rank", "ratio"), names_rank=True),
    DetectorKind(
        "threshold",
        SERIES,
        Threshold,
        ("count", "max", "min", "rank"),
        names_rank=True,
        events=True,
    ),
    DetectorKind("cooccur", EVENTS, Cooccur, ("count", "fraction")),
    DetectorKind("correlation", SERIES_PAIR, Correlation, ("r", "count")),
    DetectorKind(
        "jump",
        SERIES,
        Jump,
        ("count", "ratio", "index", "rank"),
        names_rank=True,
        events=True,
    ),
)

EVENT_DETECTORS = tuple(kind for kind, spec in DETECTORS.items() if spec.events)
RANK_DETECTORS = tuple(kind for kind, spec in DETECTORS.items() if spec.names_rank)
