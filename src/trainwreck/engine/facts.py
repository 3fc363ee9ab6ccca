"""The facts of one line, worked out in one place: where its message is once its prefixes are
removed, the rank its prefix names or the span of an inline 'rank N', whether the message is a
JSON record, which patterns match it, each one's group spans, and where its timestamp's fields are.

Both ways of reading a line ask here. The per-line path (oneline.read_line) works the facts out
on the line itself. A shape (shapes.ShapeBook) works them out on the line with its digits masked:
every step here tells digits apart only by '\\d' and digit counts, so for the patterns that are
blind to digits (rules/regexes.digit_blind) the masked line's facts are every line's of that
shape, at the same offsets. The shape is then only the key under which they are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainwreck.engine import lineinfo, prefixes
from trainwreck.rules.regex_internals import UNANCHORED

Spans = tuple[tuple[int, int], ...]  # (start, end) per group, (-1, -1) where it took no part


@dataclass(slots=True)  # (not frozen: one is made per candidate line, and frozen init is slower)
class LineFacts:
    """Where things are in a line (offsets into it)."""

    start: int  # the message, once launcher, host, logger and timestamp prefixes are removed
    end: int  # (and its right padding)
    rank: prefixes.RankSpan | None  # the rank a prefix names
    record: bool  # the message opens a JSON object (asked only when JSON records are read)
    hits: Sequence[int]  # the patterns that match the message, by index in the RE2 set

    def body(self, raw: bytes) -> bytes:
        return raw[self.start : self.end]


def facts_of(pattern_set: Any, raw: bytes, json_records: bool) -> LineFacts:
    """The prefix spans of `raw`, whether its message is a JSON record, and which patterns of
    `pattern_set` (an RE2 set, or None) match the message."""
    start, end, rank = prefixes.split_spans(raw)
    body = raw[start:end]
    record = json_records and body.lstrip()[:1] == b"{"
    hits = pattern_set.Match(body) if pattern_set is not None else None
    return LineFacts(start, end, rank, record, hits or ())


def group_spans(regex: Any, body: bytes) -> Any:
    """The group spans of a pattern (a raw RE2 regex) in a message, as RE2 gives them: offsets
    into it, (-1, -1) for a group that took no part; None when it does not match."""
    spans = regex.Match(UNANCHORED, body, 0, len(body))
    return None if spans[0][0] < 0 else spans


def inline_rank(body: bytes) -> tuple[int, int] | None:
    """The span of the digits of the first inline rank word in a message ('[Rank 3]', 'rank=3',
    'rank 3'), as offsets into it; None when there is none."""
    found = lineinfo.INLINE_RANK.search(body)
    if not found:
        return None
    group = next(g for g in (1, 2, 3) if found.start(g) >= 0)
    return found.start(group), found.end(group)
