"""The compiled patterns of a rule set: every distinct RE2 pattern once, with the matchers of
the rules that use it, the RE2 set that tells which patterns match a line, and the prefilter
that finds candidate lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import re2

from trainwreck.engine.matching import KINDS
from trainwreck.rules import regexes
from trainwreck.rules.matchers import (
    Matcher,
    MatcherKind,
    PatternRole,
    RegexMatcher,
)
from trainwreck.rules.regex_internals import UNANCHORED, raw_regex
from trainwreck.rules.rule import Rule


@dataclass
class PatternUse:
    """One use of a distinct pattern by a rule's matcher (patterns are shared across rules)."""

    run_index: int
    matcher: str
    kind: MatcherKind
    role: PatternRole | None  # the order of uses on a line (None: a record matcher's use)
    regex: Any  # the raw RE2 object: Match(anchor, bytes, pos, end) -> spans
    groups: list[tuple[str, int]]  # capture name -> group number
    spec: Matcher


@dataclass
class CompiledPatterns:
    patterns: list[str] = field(default_factory=list)  # distinct patterns, by index
    users: list[list[PatternUse]] = field(default_factory=list)  # per pattern, in role order
    records: list[PatternUse] = field(default_factory=list)  # matchers of decoded JSON records
    record_literals: set[str] = field(default_factory=set)  # their prefilter literals


def compile_patterns(rules: list[Rule]) -> CompiledPatterns:
    """Every matcher's patterns, each distinct pattern compiled once."""
    out = CompiledPatterns()
    index_of: dict[str, int] = {}
    for index, rule in enumerate(rules):
        for name, matcher in rule.matchers.items():
            runtime = KINDS[matcher.kind]
            if runtime.reads_records:
                out.records.append(PatternUse(index, name, matcher.kind, None, None, [], matcher))
                assert runtime.record_literal is not None
                out.record_literals.add(runtime.record_literal(matcher))
            for role, pattern in matcher.patterns():
                if pattern not in index_of:
                    index_of[pattern] = len(out.patterns)
                    out.patterns.append(pattern)
                    out.users.append([])
                compiled = regexes.compile(pattern)
                groups = sorted(compiled.groupindex.items(), key=lambda item: item[1])
                out.users[index_of[pattern]].append(
                    PatternUse(
                        index, name, matcher.kind, role, raw_regex(compiled), groups, matcher
                    )
                )
    for users_of in out.users:
        users_of.sort(key=lambda u: u.role.order if u.role is not None else 0)
    return out


def shared_series(rules: list[Rule]) -> dict[tuple[int, str], tuple[int, str]]:
    """(rule index, series) -> the alike series that owns its points. A series that two rules
    define alike (fed by regex matchers with the same patterns and units, each pattern once, and
    the same value and index) gets the same points from the same lines, in the same order (a
    line's points follow the patterns' order, whichever rule reads them): it is filled once and
    shared (the step times and losses that several straggler and loss rules read)."""
    shared: dict[tuple[int, str], tuple[int, str]] = {}
    owners: dict[tuple[tuple[str, ...], str, str | None], tuple[int, str]] = {}
    for index, rule in enumerate(rules):
        for name, spec in rule.series.items():
            matchers = [rule.matchers[m] for m in spec.matchers]
            if not all(isinstance(m, RegexMatcher) for m in matchers):
                continue
            fed_by = tuple(sorted(json.dumps(m.to_dict(), sort_keys=True) for m in matchers))
            if len({m.regex for m in matchers if isinstance(m, RegexMatcher)}) != len(fed_by):
                continue  # one pattern feeding twice: its points' order is the rule's own
            owner = owners.setdefault((fed_by, spec.value, spec.index), (index, name))
            if owner != (index, name):
                shared[(index, name)] = owner
    return shared


def flushes(rules: list[Rule]) -> list[tuple[int, Any]]:
    """(rule index, flush) for each matcher kind of a rule that judges what it gathered once
    it is over (a traceback: matching.KindRuntime.flush), called at the end of every block and
    of every input."""
    found = []
    for index, rule in enumerate(rules):
        kinds = {matcher.kind for matcher in rule.matchers.values()}
        found += [(index, KINDS[kind].flush) for kind in sorted(kinds) if KINDS[kind].flush]
    return found


def bulk_ok(rules: list[Rule], users: list[PatternUse]) -> bool:
    """Whether a pattern's lines can be recorded in batches: every use of a kind that records a
    line by itself alone (matching.KINDS), no 'rank' capture, and no series fed by two of its
    uses."""
    return (
        all(KINDS[u.kind].batched for u in users)
        and all(name != "rank" for name, _ in users[0].groups)
        and feeds_distinct(rules, users)
    )


def series_fed(rules: list[Rule], users: list[PatternUse]) -> frozenset[tuple[int, str]]:
    """The series (rule index, name) that take points from a pattern's matches."""
    return frozenset(
        (user.run_index, name)
        for user in users
        for name, spec in rules[user.run_index].series.items()
        if user.matcher in spec.matchers
    )


def feeds_distinct(rules: list[Rule], users: list[PatternUse]) -> bool:
    """Whether no series takes points from two uses of one pattern (then per-line order would
    interleave their points, which a per-matcher bulk store would not)."""
    seen: set[tuple[int, str]] = set()
    for user in users:
        for name, spec in rules[user.run_index].series.items():
            if user.matcher in spec.matchers:
                if (user.run_index, name) in seen:
                    return False
                seen.add((user.run_index, name))
    return True


def pattern_set(patterns: list[str]) -> Any:
    """The RE2 set of all patterns (which of them match a line), or None without patterns."""
    if not patterns:
        return None
    found = re2.Set.SearchSet(regexes.options())
    for pattern in patterns:
        found.Add(pattern)
    found.Compile()
    return found


# The literals' rarity is judged on this much of the first block: counting some 200 literals
# in all of its 2 MiB cost a quarter of a second at every start, and on the benchmark's logs the
# choice made on 64 KiB already lets through the same lines as the choice made on 2 MiB.
PREFILTER_SAMPLE = 256 << 10


def prefilters(patterns: list[str], json_literals: set[str], sample: bytes) -> Any:
    """The prefilter: one RE2 search for all patterns' required literals, chosen as the rarest in
    `sample` (the start of the first block of input, PREFILTER_SAMPLE bytes): a line must
    contain one of them to be worth matching. None without patterns."""
    counts = regexes.SampleCounts(sample[:PREFILTER_SAMPLE])
    alternatives = [f"(?:{regexes.prefilter_pattern(p, counts)})" for p in patterns]
    alternatives += sorted(json_literals)
    if not alternatives:
        return None
    opts = regexes.options()
    opts.never_capture = True
    opts.max_mem = 256 << 20
    return raw_regex(re2.compile("(?m)" + "|".join(alternatives), opts))


def any_of_prefilters(patterns: list[str]) -> Any:
    """One RE2 search (multi-line) for any line that one of `patterns` may match, by their
    prefilters (regexes.prefilter_pattern, without a sample)."""
    alternatives = [f"(?:{regexes.prefilter_pattern(p)})" for p in patterns]
    opts = regexes.options()
    opts.never_capture = True
    return raw_regex(re2.compile("(?m)" + "|".join(alternatives), opts))


def candidate_lines(
    prefilter: Any, block: bytes, pos: int, line_no: int
) -> Iterator[tuple[int, int, bytes]]:
    """The prefilter's candidate lines of `block` from `pos` (numbered from `line_no`):
    (number, offset, line)."""
    match = prefilter.Match
    end = len(block)
    counted = pos
    while pos < end:
        start = match(UNANCHORED, block, pos, end)[0][0]
        if start < 0:
            return
        line_start = block.rfind(b"\n", 0, start) + 1
        line_end = block.find(b"\n", start)
        if line_end < 0:
            line_end = end
        line_no += block.count(b"\n", counted, line_start)
        counted = line_start
        pos = line_end + 1
        # no CR here (Engine._scan_candidates checks)
        yield line_no, line_start, block[line_start:line_end]
