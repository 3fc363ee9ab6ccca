"""One candidate line read on its own (scanning.Engine sends here the lines no shape decides):
its facts worked out on the line itself (facts.py: the message, its rank, which patterns match),
each pattern that matches run again for its captures once, shared by every rule using it, and
each use stepped by its matcher's kind."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from trainwreck.engine import prefixes
from trainwreck.engine.captures import named
from trainwreck.engine.captures import number as to_float
from trainwreck.engine.facts import facts_of, group_spans, inline_rank
from trainwreck.engine.lineinfo import parse_time, rank_number
from trainwreck.engine.matching import KINDS, Line
from trainwreck.engine.patterns import PatternUse
from trainwreck.engine.reading import MAX_LINE
from trainwreck.engine.state import FileScan
from trainwreck.engine.store import record as record_match


class Patterns(Protocol):
    """What a line is matched against (scanning.Engine): the RE2 set of every pattern, the uses
    of each pattern, and the JSON-record matchers."""

    set: Any
    users: Sequence[Sequence[PatternUse]]
    records: Sequence[Any]


def read_line(engine: Patterns, raw: bytes, line_no: int, offset: int, scan: FileScan) -> None:
    if len(raw) > MAX_LINE:
        raw = raw[:MAX_LINE]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    facts = facts_of(engine.set, raw, bool(engine.records))
    body = facts.body(raw)
    parsed_record: dict[str, Any] | None = None
    if facts.record:
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            parsed_record = parsed
    if not facts.hits and parsed_record is None:
        return
    rank: Any
    if facts.rank is not None:
        named_rank = prefixes.rank_of(raw, facts.rank)
        rank = rank_number(named_rank) if isinstance(named_rank, int) else named_rank
    elif parsed_record is not None and isinstance(parsed_record.get("rank"), int):
        rank = rank_number(parsed_record["rank"])
    elif (inline := inline_rank(body)) is not None:
        rank = rank_number(body[inline[0] : inline[1]])
    else:
        rank = scan.rank
    # The time is parsed when a rule first asks for it (series, evidence, a rank's first line).
    t: float | None = None
    if parsed_record is not None and isinstance(parsed_record.get("t"), (int, float)):
        t = to_float(parsed_record["t"])
    rank = scan.result.admit_rank(rank)
    runs = scan.runs
    context = Line(scan.file_id, scan.name, line_no, raw, rank, t, offset, parse_time)
    # Each use of each pattern hit, stepped by its matcher's kind (matching.KINDS).
    if facts.hits:
        for index in facts.hits:
            users = engine.users[index]
            caps = captures(users[0], body)
            if caps is None:
                continue
            for user in users:  # (caps are only read: no copy per use)
                KINDS[user.kind].step(user, caps, context, runs[user.run_index], record_match)
    if parsed_record is not None:
        for use in engine.records:
            runtime = KINDS[use.kind]
            assert runtime.matches_record is not None
            if runtime.matches_record(use.spec, parsed_record):
                caps = {k: v for k, v in parsed_record.items() if isinstance(k, str)}
                runtime.step(use, caps, context, runs[use.run_index], record_match)


def captures(user: PatternUse, body: bytes) -> dict[str, Any] | None:
    """Named captures of a pattern on a message (computed once, shared by every rule using it)."""
    if not user.groups:
        return {}
    spans = group_spans(user.regex, body)
    return None if spans is None else named(user.groups, body, spans)
