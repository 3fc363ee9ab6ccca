"""Matcher kinds: what a rule can match in a log, one typed class per kind, in one table.

A matcher is a `RegexMatcher` (one RE2 pattern on a line's message), a `JsonMatcher` (JSON-lines
records whose fields equal given values) or a `BlockMatcher` (a start line, then an end line
within `max_lines` of the same file and rank, with extra capture patterns inside). Each has its
`values` (capture -> unit) and its patterns, each with the role it plays.

`MATCHERS` holds one `MatcherKindRow` per kind: how a rule file writes it (the YAML key), how it
normalises from the rule file, which patterns it holds, and what validation checks of it beyond
the schema. The runtime side of each kind (how the engine compiles and records it) is the row of
the same kind in engine/matching.py. Adding a kind: its class and row here, its runtime row
there, its schema under `matchers` in schemas/rule.schema.json, and docs/rule-language.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, ClassVar

from trainwreck.rules.metrics import metric_regex


class MatcherKind(str, Enum):
    REGEX = "regex"
    JSON = "json"
    BLOCK = "block"
    METRIC = "metric"

    def __str__(self) -> str:
        return self.value


class PatternRole(str, Enum):
    """What a pattern does in its matcher. Their order on one line: a block's end closes it
    before a new one opens on the same line."""

    END = "end"
    CAPTURE = "capture"
    REGEX = "regex"
    START = "start"

    def __str__(self) -> str:
        return self.value

    @property
    def order(self) -> int:
        return _ROLE_ORDER[self]


_ROLE_ORDER = {role: index for index, role in enumerate(PatternRole)}


@dataclass(frozen=True)
class UnitCapture:
    """A value whose unit is the text of another capture of the same match (`default` when
    that capture is missing or empty)."""

    unit_capture: str
    default: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"unit_capture": self.unit_capture, "default": self.default}


Unit = str | UnitCapture  # a unit name (ms, GiB, number, string ...) or a unit capture


def values_from_dict(data: Mapping[str, Any]) -> dict[str, Unit]:
    return {
        capture: UnitCapture(unit["unit_capture"], unit.get("default"))
        if isinstance(unit, Mapping)
        else str(unit)
        for capture, unit in data.items()
    }


def values_to_dict(values: Mapping[str, Unit]) -> dict[str, Any]:
    return {
        capture: unit.to_dict() if isinstance(unit, UnitCapture) else unit
        for capture, unit in values.items()
    }


@dataclass(frozen=True, eq=False)
class Matcher:
    """One matcher of a rule: its kind's fields, and `values` (capture -> unit)."""

    kind: ClassVar[MatcherKind]
    values: Mapping[str, Unit]

    def patterns(self) -> tuple[tuple[PatternRole, str], ...]:
        """Its RE2 patterns, each with its role, in the order the rule gives them."""
        return ()

    def opens(self) -> tuple[str, int] | None:
        """For a matcher that spans lines: the pattern of the line that opens it, and the most
        lines it spans (a parallel scan never cuts a file where one may be open)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """The compiled form stored in a bundle."""
        return {"kind": self.kind.value, **self._fields(), "values": values_to_dict(self.values)}

    def _fields(self) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Matcher:
        """A matcher from its compiled form (KeyError or ValueError when it is malformed)."""
        row = MATCHERS[MatcherKind(data["kind"])]
        return row.from_dict(data)


@dataclass(frozen=True, eq=False)
class RegexMatcher(Matcher):
    kind: ClassVar[MatcherKind] = MatcherKind.REGEX
    regex: str

    def patterns(self) -> tuple[tuple[PatternRole, str], ...]:
        return ((PatternRole.REGEX, self.regex),)

    def _fields(self) -> dict[str, Any]:
        return {"regex": self.regex}


@dataclass(frozen=True, eq=False)
class MetricMatcher(RegexMatcher):
    """A named number of the metric vocabulary (rules/metrics.py): its pattern is built from the
    quantity's keys and the common print shapes, and runs like a regex matcher's."""

    kind: ClassVar[MatcherKind] = MatcherKind.METRIC
    metric: str
    nonfinite: bool = False  # only a nan or inf value matches

    def _fields(self) -> dict[str, Any]:
        return {"metric": self.metric, "nonfinite": self.nonfinite, "regex": self.regex}


@dataclass(frozen=True, eq=False)
class JsonMatcher(Matcher):
    kind: ClassVar[MatcherKind] = MatcherKind.JSON
    json: Mapping[str, Any]  # field -> the value it must equal

    def _fields(self) -> dict[str, Any]:
        return {"json": dict(self.json)}


@dataclass(frozen=True, eq=False)
class BlockMatcher(Matcher):
    kind: ClassVar[MatcherKind] = MatcherKind.BLOCK
    start: str
    end: str
    max_lines: int  # from start to end inclusive
    capture: tuple[str, ...]  # patterns tried on the lines inside

    def opens(self) -> tuple[str, int] | None:
        return self.start, self.max_lines

    def patterns(self) -> tuple[tuple[PatternRole, str], ...]:
        return (
            (PatternRole.START, self.start),
            (PatternRole.END, self.end),
            *((PatternRole.CAPTURE, pattern) for pattern in self.capture),
        )

    def _fields(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "max_lines": self.max_lines,
            "capture": list(self.capture),
        }


# --- the table ------------------------------------------------------------------------------------

Where = tuple[Any, ...]  # a location inside the rule document


@dataclass(frozen=True)
class MatcherKindRow:
    kind: MatcherKind
    key: str  # the key that names the kind in a rule file (exactly one per matcher)
    # The typed matcher from a rule file's spec (valid by the schema).
    from_yaml: Callable[[Mapping[str, Any], dict[str, Unit]], Matcher]
    # The typed matcher from its compiled form.
    from_dict: Callable[[Mapping[str, Any]], Matcher]
    # Where in the rule file each of its patterns is (for errors at the pattern's column).
    pattern_paths: Callable[[Matcher], tuple[Where, ...]]
    # Whether its captures are known from its patterns (a JSON record may hold any field).
    named_captures: bool = True


def _regex_yaml(spec: Mapping[str, Any], values: dict[str, Unit]) -> Matcher:
    return RegexMatcher(values, spec["regex"])


def _regex_dict(data: Mapping[str, Any]) -> Matcher:
    return RegexMatcher(values_from_dict(data["values"]), str(data["regex"]))


def _metric_yaml(spec: Mapping[str, Any], values: dict[str, Unit]) -> Matcher:
    # The value is a number unless the rule says otherwise (a unit, for a time).
    nonfinite = bool(spec.get("nonfinite", False))
    return MetricMatcher(
        {"value": "number", **values},
        metric_regex(spec["metric"], nonfinite),
        str(spec["metric"]),
        nonfinite,
    )


def _metric_dict(data: Mapping[str, Any]) -> Matcher:
    return MetricMatcher(
        values_from_dict(data["values"]),
        str(data["regex"]),
        str(data["metric"]),
        bool(data["nonfinite"]),
    )


def _json_yaml(spec: Mapping[str, Any], values: dict[str, Unit]) -> Matcher:
    return JsonMatcher(values, dict(spec["json"]))


def _json_dict(data: Mapping[str, Any]) -> Matcher:
    wanted = data["json"]
    if not isinstance(wanted, Mapping):
        raise ValueError(f"json must be a mapping, not {wanted!r}")
    return JsonMatcher(values_from_dict(data["values"]), dict(wanted))


def _block_yaml(spec: Mapping[str, Any], values: dict[str, Unit]) -> Matcher:
    block = spec["block"]
    return BlockMatcher(
        values,
        block["start"],
        block["end"],
        int(block.get("max_lines", 200)),
        tuple(block.get("capture") or ()),
    )


def _block_dict(data: Mapping[str, Any]) -> Matcher:
    return BlockMatcher(
        values_from_dict(data["values"]),
        str(data["start"]),
        str(data["end"]),
        int(data["max_lines"]),
        tuple(str(p) for p in data["capture"]),
    )


def _block_paths(matcher: Matcher) -> tuple[Where, ...]:
    assert isinstance(matcher, BlockMatcher)
    return (
        ("block", "start"),
        ("block", "end"),
        *(("block", "capture", index) for index in range(len(matcher.capture))),
    )


def _table(*rows: MatcherKindRow) -> Mapping[MatcherKind, MatcherKindRow]:
    return MappingProxyType({row.kind: row for row in rows})


MATCHERS: Mapping[MatcherKind, MatcherKindRow] = _table(
    MatcherKindRow(MatcherKind.REGEX, "regex", _regex_yaml, _regex_dict, lambda m: (("regex",),)),
    MatcherKindRow(
        MatcherKind.JSON, "json", _json_yaml, _json_dict, lambda m: (), named_captures=False
    ),
    MatcherKindRow(MatcherKind.BLOCK, "block", _block_yaml, _block_dict, _block_paths),
    MatcherKindRow(
        MatcherKind.METRIC, "metric", _metric_yaml, _metric_dict, lambda m: (("metric",),)
    ),
)


def matcher_from_yaml(spec: Mapping[str, Any]) -> Matcher:
    """The typed matcher of a rule file's spec (valid by the schema: exactly one kind key)."""
    row = next(row for row in MATCHERS.values() if row.key in spec)
    return row.from_yaml(spec, values_from_dict(spec.get("values") or {}))
