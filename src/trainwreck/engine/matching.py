"""The runtime of every matcher kind: what the engine does with a line a matcher matches, one row
per kind of `rules.matchers.MATCHERS` (tests/test_rules_typed.py keeps the two tables alike).

A kind's patterns (`Matcher.patterns()`, each with its role) are compiled with every other
pattern of the rule set, once each; one RE2 set tells which of them a line holds. What a row
says:
- `batched`: whether a line its patterns hit can be recorded with other lines, in a batch: what it
  records of a line depends on that line alone (a regex matcher). A kind that carries state from
  line to line (a block: start ... end) is stepped line by line, in line order, and its lines
  cut the batches of the others there;
- `step`: what a hit of one of its patterns records, for a line recorded on its own: the line's
  named captures in, matches out through the recorder (`Record`), with the kind's own state in the
  rule's state (`RuleRun.blocks`);
- `flush`: for a kind that judges what it gathered only once it is over (a traceback), what it
  does when lines stop coming: at the end of a block (the units no later line can join) and at
  the end of an input (all of them);
- `reads_records`: the kind matches JSON-object lines by their fields, not by a pattern: the
  engine decodes such lines (a line that holds a JSON object is never read through its shape);
  `record_literal` is a literal any line it matches must hold (for the prefilter), and
  `matches_record` tells whether a decoded record is one of its matches.

Adding a kind: its typed class and row in rules/matchers.py, its row here, the schema's
`matchers` section and docs/rule-language.md; tests/test_diagnose_bulk.py then compares its
results read through shapes and batches with those read line by line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import re2

from trainwreck.engine import tracebacks
from trainwreck.engine.reading import evidence_text
from trainwreck.findings import Evidence
from trainwreck.rules.matchers import (
    MATCHERS,
    BlockMatcher,
    JsonMatcher,
    Matcher,
    MatcherKind,
    PatternRole,
)

if TYPE_CHECKING:
    from trainwreck.engine.patterns import PatternUse
    from trainwreck.engine.state import RuleRun


class Line:
    """A line recorded on its own: where it is, its rank and time; its text is decoded only when
    kept as evidence, its time parsed only when first read (`when` parses it)."""

    __slots__ = ("_t", "_text", "file", "name", "number", "offset", "rank", "raw", "when")

    def __init__(
        self,
        file_id: int,
        name: str,
        number: int,
        raw: bytes,
        rank: Any,
        t: float | None,
        offset: int,
        when: Callable[[bytes], float],
    ):
        self.file = file_id
        self.name = name
        self.number = number
        self.raw = raw
        self.rank = rank
        self._t = t
        self.offset = offset
        self.when = when
        self._text: str | None = None

    @property
    def t(self) -> float:
        """Unix time of the line (NaN without a timestamp)."""
        if self._t is None:
            self._t = self.when(self.raw)
        return self._t

    def text(self) -> str:
        if self._text is None:
            self._text = evidence_text(self.raw)
        return self._text

    def evidence(self, part: str, rank: Any) -> Evidence:
        return Evidence(
            self.name, self.number, self.text(), rank, part, self.t, self.offset, self.file
        )


class Record(Protocol):
    """Records one match of a matcher: its captures (not yet converted by its units), the line,
    and for a multi-line match the evidence of its first line."""

    def __call__(
        self,
        run: RuleRun,
        matcher: str,
        caps: dict[str, Any],
        line: Line,
        start: Evidence | None,
    ) -> None: ...


Step = Callable[["PatternUse", dict[str, Any], Line, "RuleRun", Record], None]
# (the rule's state, the file, the number of the next line to come or None at the input's end)
Flush = Callable[["RuleRun", int, "int | None", Record], None]


@dataclass(frozen=True)
class KindRuntime:
    kind: MatcherKind
    batched: bool
    step: Step
    reads_records: bool = False
    record_literal: Callable[[Matcher], str] | None = None
    matches_record: Callable[[Matcher, Mapping[str, Any]], bool] | None = None
    flush: Flush | None = None


def _regex_step(
    use: PatternUse, caps: dict[str, Any], line: Line, run: RuleRun, record: Record
) -> None:
    record(run, use.matcher, caps, line, None)


def _block_step(
    use: PatternUse, caps: dict[str, Any], line: Line, run: RuleRun, record: Record
) -> None:
    """A block opens on its start line, gathers the captures of the lines inside (first match
    wins) and matches on its end line within max_lines of the start, per file and rank."""
    block = use.spec
    assert isinstance(block, BlockMatcher)
    key = (use.matcher, line.file, line.rank)
    if use.role == PatternRole.START:
        run.blocks[key] = (line.number, dict(caps), line.evidence(use.matcher, line.rank))
        return
    opened = run.blocks.get(key)
    if opened is None:
        return
    start_line, block_caps, start_evidence = opened
    if line.number - start_line + 1 > block.max_lines:
        del run.blocks[key]
        return
    for name, value in caps.items():
        block_caps.setdefault(name, value)
    if use.role == PatternRole.END:
        del run.blocks[key]
        record(run, use.matcher, block_caps, line, start_evidence)


def _json_literal(matcher: Matcher) -> str:
    """A literal a matching JSON line must contain: its first string value (quoted), else its
    first key, else an object's opening."""
    assert isinstance(matcher, JsonMatcher)
    wanted = matcher.json
    strings = [v for v in wanted.values() if isinstance(v, str) and len(v) >= 2]
    if strings:
        return re2.escape(json.dumps(strings[0]))
    if wanted:
        return re2.escape(json.dumps(next(iter(wanted))))
    return r"\{\s*\""


def _json_matches(matcher: Matcher, record: Mapping[str, Any]) -> bool:
    assert isinstance(matcher, JsonMatcher)
    return all(record.get(k) == v for k, v in matcher.json.items())


def _json_step(
    use: PatternUse, caps: dict[str, Any], line: Line, run: RuleRun, record: Record
) -> None:
    record(run, use.matcher, caps, line, None)


def _table(*rows: KindRuntime) -> Mapping[MatcherKind, KindRuntime]:
    table = MappingProxyType({row.kind: row for row in rows})
    assert set(table) == set(MATCHERS), "every matcher kind has its runtime"
    return table


KINDS: Mapping[MatcherKind, KindRuntime] = _table(
    KindRuntime(MatcherKind.REGEX, batched=True, step=_regex_step),
    KindRuntime(
        MatcherKind.JSON,
        batched=True,
        step=_json_step,
        reads_records=True,
        record_literal=_json_literal,
        matches_record=_json_matches,
    ),
    KindRuntime(MatcherKind.BLOCK, batched=False, step=_block_step),
    # A metric matcher is a regex built from the metric vocabulary: recorded the same way.
    KindRuntime(MatcherKind.METRIC, batched=True, step=_regex_step),
    # A traceback is parsed line by line, in line order, and judged once it is over.
    KindRuntime(MatcherKind.TRACEBACK, batched=False, step=tracebacks.step, flush=tracebacks.flush),
)
