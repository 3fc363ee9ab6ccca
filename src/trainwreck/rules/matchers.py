"""Matcher kinds: what a rule can match in a log, one typed class per kind, in one table.

A matcher is a `RegexMatcher` (one RE2 pattern on a line's message), a `JsonMatcher` (JSON-lines
records whose fields equal given values), a `BlockMatcher` (a start line, then an end line
within `max_lines` of the same file and rank, with extra capture patterns inside) or a
`TracebackMatcher` (a traceback read as one unit, matched on its frames and exception type:
rules/tracebacks.py). Each has its `values` (capture -> unit) and its patterns, each with the
role it plays.

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

from trainwreck.rules import regexes
from trainwreck.rules import tracebacks as tb
from trainwreck.rules.metrics import metric_regex


class MatcherKind(str, Enum):
    REGEX = "regex"
    JSON = "json"
    BLOCK = "block"
    METRIC = "metric"
    TRACEBACK = "traceback"

    def __str__(self) -> str:
        return self.value


class PatternRole(str, Enum):
    """What a pattern does in its matcher. Their order on one line: a block's end closes it
    before a new one opens on the same line."""

    END = "end"
    CAPTURE = "capture"
    REGEX = "regex"
    START = "start"
    # The lines of a traceback (rules/tracebacks.py): each pattern has one role.
    TB_HEADER = "traceback header"
    TB_FRAME = "traceback frame"
    TB_CXX_FRAME = "traceback C++ frame"
    TB_EXCEPTION = "traceback exception"
    TB_TERMINATE = "traceback C++ exception"

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

    def opens(self) -> tuple[tuple[str, ...], int] | None:
        """For a matcher that spans lines: the patterns of the lines that may open it, and the
        most lines it spans (a parallel scan never cuts a file where one may be open)."""
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

    def opens(self) -> tuple[tuple[str, ...], int] | None:
        return (self.start,), self.max_lines

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


# The lines of every traceback, each pattern with its role (the same for every traceback matcher,
# so each is compiled and matched once however many rules read tracebacks).
TRACEBACK_LINES: tuple[tuple[PatternRole, str], ...] = (
    (PatternRole.TB_HEADER, tb.HEADER),
    (PatternRole.TB_HEADER, tb.FAULT_HEADER),
    (PatternRole.TB_FRAME, tb.PY_FRAME),
    (PatternRole.TB_FRAME, tb.RICH_FRAME),
    (PatternRole.TB_FRAME, tb.IPYTHON_FRAME),
    (PatternRole.TB_FRAME, tb.IPYTHON7_FRAME),
    (PatternRole.TB_FRAME, tb.IPYTHON7_CELL_FRAME),
    (PatternRole.TB_CXX_FRAME, tb.CXX_FRAME),
    (PatternRole.TB_CXX_FRAME, tb.CXX_CAPTURED_FRAME),
    (PatternRole.TB_CXX_FRAME, tb.CXX_RAISED),
    (PatternRole.TB_EXCEPTION, tb.EXCEPTION),
    (PatternRole.TB_EXCEPTION, tb.MODULE_EXCEPTION),
    (PatternRole.TB_TERMINATE, tb.TERMINATE),
)
# The lines that may open a traceback unit: any of its lines but the exception (an excerpt may
# start anywhere in it).
TRACEBACK_OPENERS = tuple(
    pattern for role, pattern in TRACEBACK_LINES if role != PatternRole.TB_EXCEPTION
)


@dataclass(frozen=True, eq=False)
class TracebackMatcher(Matcher):
    """A traceback, read as one unit (engine/tracebacks.py), that holds every frame of `frames`
    and, when its exception line is in the log, ends in one of `exception` (any, when empty)
    with a message `message` matches (an RE2 pattern; any, when None). A traceback cut before its
    exception line matches on its frames alone (a cut match: lower confidence)."""

    kind: ClassVar[MatcherKind] = MatcherKind.TRACEBACK
    frames: tuple[str, ...]  # frame specs, PATH:FUNCTION (rules/tracebacks.py)
    exception: tuple[str, ...]
    message: str | None
    max_lines: int  # the most lines one traceback spans, from its first line
    # Whether a traceback cut before its exception line may match on its frames: false for frames
    # that other failures run through too, where only the exception tells them apart.
    cut: bool = True

    def specs(self) -> tuple[tb.FrameSpec, ...]:
        return tuple(
            spec for text in self.frames if (spec := tb.parse_frame_spec(text)) is not None
        )

    def opens(self) -> tuple[tuple[str, ...], int] | None:
        return TRACEBACK_OPENERS, self.max_lines

    def patterns(self) -> tuple[tuple[PatternRole, str], ...]:
        return TRACEBACK_LINES

    def _fields(self) -> dict[str, Any]:
        return {
            "frames": list(self.frames),
            "exception": list(self.exception),
            "message": self.message,
            "max_lines": self.max_lines,
            "cut": self.cut,
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
    # Its captures when they are its own, not its patterns' groups (a traceback's).
    captures: frozenset[str] | None = None
    # Problems of its fields beyond the schema: (where in the matcher, message), for
    # validation to place at file:line:col.
    problems: Callable[[Matcher], list[tuple[Where, str]]] | None = None


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


def _traceback_yaml(spec: Mapping[str, Any], values: dict[str, Unit]) -> Matcher:
    found = spec["traceback"]
    message = found.get("message")
    return TracebackMatcher(
        values,
        tuple(str(frame) for frame in found["frames"]),
        tuple(str(name) for name in found.get("exception") or ()),
        None if message is None else str(message),
        int(found.get("max_lines", 200)),
        bool(found.get("cut", True)),
    )


def _traceback_dict(data: Mapping[str, Any]) -> Matcher:
    message = data["message"]
    return TracebackMatcher(
        values_from_dict(data["values"]),
        tuple(str(frame) for frame in data["frames"]),
        tuple(str(name) for name in data["exception"]),
        None if message is None else str(message),
        int(data["max_lines"]),
        bool(data.get("cut", True)),
    )


def _traceback_problems(matcher: Matcher) -> list[tuple[Where, str]]:
    assert isinstance(matcher, TracebackMatcher)
    problems: list[tuple[Where, str]] = []
    for index, text in enumerate(matcher.frames):
        error = tb.frame_spec_error(text)
        if error:
            problems.append((("traceback", "frames", index), error))
    for index, name in enumerate(matcher.exception):
        error = tb.exception_name_error(name)
        if error:
            problems.append((("traceback", "exception", index), error))
    if matcher.message is not None:
        compiled = regexes.compile_error(matcher.message)
        if compiled:
            problems.append((("traceback", "message"), compiled[1]))
    return problems


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
    # A traceback's line patterns are the language's own, not the rule's: nothing to place.
    MatcherKindRow(
        MatcherKind.TRACEBACK,
        "traceback",
        _traceback_yaml,
        _traceback_dict,
        lambda m: (),
        captures=tb.CAPTURES,
        problems=_traceback_problems,
    ),
)


def matcher_from_yaml(spec: Mapping[str, Any]) -> Matcher:
    """The typed matcher of a rule file's spec (valid by the schema: exactly one kind key)."""
    row = next(row for row in MATCHERS.values() if row.key in spec)
    return row.from_yaml(spec, values_from_dict(spec.get("values") or {}))
