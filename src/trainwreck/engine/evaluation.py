"""Evaluating a rule after the scan: its detectors over the series (in dependency order), its
condition, confidence and boosts, the evidence it reports, its ranks and the initiating rank."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwreck.engine import detectors as det
from trainwreck.engine.reading import evidence_text, is_path, read_line_at
from trainwreck.engine.state import (
    MAX_EVIDENCE_PER_MATCHER,
    MAX_ROWS,
    RuleRun,
    ScanResult,
    UnrankedFile,
)
from trainwreck.findings import NEVER, Evidence, FirstKey
from trainwreck.rules import condition as cond
from trainwreck.rules.registry import EVENTS, SERIES_PAIR
from trainwreck.rules.rule import RankHow, Rule
from trainwreck.rules.units import to_number


@dataclass
class RuleOutcome:
    rule: Rule
    fired: bool
    confidence: float
    boosts: dict[str, float]
    detectors: dict[str, det.DetectorResult]
    evidence: list[Evidence]
    ranks: list[Any]
    initiating_rank: Any
    first_key: FirstKey
    notes: list[str]
    error: str | None = None


# A finding that rests only on the frames of tracebacks cut before their exception line keeps
# this share of its confidence (the frames name where it failed, not what failed there).
CUT_CONFIDENCE = 0.6
CUT_NOTE_START = "from the frames of a traceback cut before its message"
CUT_NOTE = (
    CUT_NOTE_START + " (no exception line follows them in the log): confidence {before:.2f}"
    " lowered to {after:.2f}"
)


class RuleContext:
    """What a rule's condition reads after the scan (condition.Context): its matchers and
    detectors. `whole`: traceback matches count only when their exception line is in the log
    (not cut: MatcherState.cut)."""

    def __init__(self, run: RuleRun, results: dict[str, det.DetectorResult], whole: bool = False):
        self.run = run
        self.results = results
        self.whole = whole

    def _matches(self, name: str) -> int:
        state = self.run.matchers[name]
        return state.count - state.cut if self.whole else state.count

    def truth(self, name: str) -> bool:
        if name in self.run.matchers:
            return self._matches(name) > 0
        return self.results[name].fired

    def count(self, name: str) -> float:
        if name in self.run.matchers:
            return float(self._matches(name))
        return float(self.results[name].outputs.get("count", 0.0))

    def numbers(self, part: str, field_name: str) -> np.ndarray | float:
        if part in self.run.matchers:
            column = self.run.matchers[part].columns.get(field_name, [])
            return np.asarray([to_number(v) for v in column], dtype=float)
        return float(self.results[part].outputs.get(field_name, math.nan))

    def strings(self, part: str, field_name: str) -> list[str]:
        column = (
            self.run.matchers[part].columns.get(field_name, []) if part in self.run.matchers else []
        )
        return ["" if v is None else str(v) for v in column]


def evaluate(run: RuleRun, scan: ScanResult) -> RuleOutcome:
    """A rule's verdict on a scan: its detectors, condition, confidence and, when it fired, its
    evidence, ranks and initiating rank."""
    rule = run.rule
    notes: list[str] = []
    results, cooccur_hits = _run_detectors(run, notes)
    context = RuleContext(run, results)
    tree = rule.condition_tree
    fired = cond.evaluate(tree, context) if tree is not None else False
    boosts: dict[str, float] = {}
    for part, amount in rule.boost.items():
        if context.truth(part):
            boosts[part] = amount
    confidence = min(0.99, max(0.01, rule.confidence + sum(boosts.values())))
    if (
        fired
        and tree is not None
        and any(state.cut for state in run.matchers.values())
        and not cond.evaluate(tree, RuleContext(run, results, whole=True))
    ):
        # It fires only through tracebacks cut before their message: say so, and trust less.
        lowered = max(0.01, round(confidence * CUT_CONFIDENCE, 2))
        notes.append(CUT_NOTE.format(before=confidence, after=lowered))
        confidence = lowered
    evidence: list[Evidence] = []
    ranks: set[Any] = set()
    first_key = NEVER
    if fired:
        first_key = _report(run, results, cooccur_hits, evidence, ranks, notes, scan.files)
    ranks.discard(None)
    initiating = initiating_rank(rule, run, results, scan) if fired else None
    return RuleOutcome(
        rule,
        fired,
        confidence,
        boosts,
        results,
        evidence,
        sorted(ranks, key=det.rank_sort_key),
        initiating,
        first_key,
        notes,
    )


CooccurHits = dict[str, tuple[det.EventTable, np.ndarray]]  # detector -> (a-events, hit mask)


def _run_detectors(
    run: RuleRun, notes: list[str]
) -> tuple[dict[str, det.DetectorResult], CooccurHits]:
    """Every detector of the rule in dependency order, on the inputs its kind reads."""
    rule = run.rule
    results: dict[str, det.DetectorResult] = {}
    cooccur_hits: CooccurHits = {}
    read: dict[str, dict[Any, det.Points]] = {}

    def points_of(series: str) -> dict[Any, det.Points]:
        """A series' points per rank, read once for all the rule's detectors."""
        if series not in read:
            per_rank = run.series.get(series, {})
            read[series] = {rank: buffer.points() for rank, buffer in per_rank.items()}
        return read[series]

    for name in rule.detector_order:
        detector = rule.detectors[name]
        settings = detector.settings
        function = det.FUNCTIONS[detector.kind]
        parts = settings.references()
        if detector.spec.inputs == EVENTS:
            tables = []
            for part in parts:
                if part in run.matchers:
                    tables.append(det.events_table(run.matchers[part].events or []))
                else:
                    tables.append(det.events_table(results[part].events))
            result, hits = function(*tables, settings)
            cooccur_hits[name] = (tables[0], hits)
        else:
            read_series = parts[0]
            buffers = run.series.get(read_series, {})
            series = points_of(read_series)
            if detector.spec.inputs == SERIES_PAIR:
                result = function(series, points_of(parts[1]), settings)
            else:
                result = function(series, settings)
            thinned = [b for b in buffers.values() if b.thinned]
            if thinned:
                held = sum(b.count for b in thinned)
                offered = sum(b.offered for b in thinned)
                note = (
                    f"series '{read_series}' was thinned to stay within memory: {held:,} of"
                    f" {offered:,} points kept on {len(thinned)} rank(s): a regular sample of the"
                    " steps, and every point that stands out from it"
                )
                if note not in notes:  # (once per series, however many detectors read it)
                    notes.append(note)
        results[name] = _unknown_ranks(result)
    return results, cooccur_hits


def _report(
    run: RuleRun,
    results: dict[str, det.DetectorResult],
    cooccur_hits: CooccurHits,
    evidence: list[Evidence],
    ranks: set[Any],
    notes: list[str],
    files: list[str],
) -> FirstKey:
    """What a fired rule reports from its `report.evidence` parts: their evidence lines, ranks
    and notes (appended to the lists given). Returns the order key of its earliest evidence.
    `files`: the scan's inputs, by position."""
    rule = run.rule
    first_key = NEVER
    for part in rule.report.evidence:
        if part in run.matchers:
            state = run.matchers[part]
            evidence.extend(state.evidence)
            ranks.update(state.rank_counts)
            for key in state.first.values():
                first_key = min(first_key, key.order())
        elif part in results:
            result = results[part]
            if not result.fired and part not in rule.report.evidence[:1]:
                continue
            ranks.update(result.ranks)
            if part in cooccur_hits:
                table, hits = cooccur_hits[part]
                for i in np.flatnonzero(hits)[:MAX_EVIDENCE_PER_MATCHER]:
                    file_id = int(table.file[i])
                    evidence.append(
                        Evidence(
                            files[file_id],
                            int(table.line[i]),
                            "",
                            table.rank[i],
                            part,
                            float(table.t[i]),
                            int(table.offset[i]),
                            file_id,
                        )
                    )
            for event in result.events[:MAX_EVIDENCE_PER_MATCHER]:
                evidence.append(
                    Evidence(
                        files[event.file],
                        event.line,
                        "",
                        event.rank,
                        part,
                        event.t,
                        event.offset,
                        event.file,
                    )
                )
                first_key = min(first_key, FirstKey(event.t, event.file, event.line).order())
            if result.note:
                notes.append(f"{part}: {result.note}")
    for part, state in run.matchers.items():
        if state.truncated and part in rule.report.evidence:
            notes.append(
                f"matcher '{part}' matched more than {MAX_ROWS:,} lines; later values were not compared"
            )
    return first_key


def _unknown_ranks(result: det.DetectorResult) -> det.DetectorResult:
    """A detector's result with series of unranked files (state.UnrankedFile) named rank None,
    as their lines are."""

    def plain(rank: Any) -> Any:
        return None if isinstance(rank, UnrankedFile) else rank

    result.ranks = [plain(rank) for rank in result.ranks]
    result.rank = plain(result.rank)
    for event in result.events:
        event.rank = plain(event.rank)
    return result


def earliest_rank(firsts: dict[Any, FirstKey]) -> Any:
    """Rank of the earliest line: by timestamp when they exist, else by line order when all in one
    file; None when the order cannot be told."""
    known = {rank: key for rank, key in firsts.items() if rank is not None}
    if not known:
        return None
    if len(known) == 1:
        return next(iter(known))
    timed = {rank: key for rank, key in known.items() if math.isfinite(key[0])}
    if len(timed) == len(known):
        return min(timed, key=lambda r: (timed[r][0], timed[r][1], timed[r][2]))
    files = {key[1] for key in known.values()}
    if len(files) == 1:
        return min(known, key=lambda r: known[r][2])
    return None


def initiating_rank(
    rule: Rule, run: RuleRun, results: dict[str, det.DetectorResult], scan: ScanResult
) -> Any:
    how, part = rule.report.initiating_rank.how, rule.report.initiating_rank.part
    if how == RankHow.NONE:
        return None
    if how == RankHow.FIRST:
        firsts: dict[Any, FirstKey] = {}
        for name in rule.report.evidence:
            if name in run.matchers:
                for rank, key in run.matchers[name].first.items():
                    if rank not in firsts or key.order() < firsts[rank].order():
                        firsts[rank] = key
        return earliest_rank(firsts)
    assert part is not None
    if how == RankHow.MATCHER:
        return earliest_rank(run.matchers[part].first)
    if how == RankHow.DETECTOR:
        return results[part].rank if results[part].fired else None
    reporting = {r for r in run.matchers[part].rank_counts if r is not None}
    seen = {r for r in scan.ranks_seen if isinstance(r, int)}
    missing = sorted(seen - reporting)
    if reporting and len(missing) >= 1:
        return missing[0] if len(missing) == 1 else missing
    return None


def fill_evidence_text(outcomes: list[RuleOutcome], sources: dict[int, Any]) -> None:
    """Read the text of evidence lines known only by position (detector events): seek to the
    recorded byte offset (gzip streams seek by decompressing, bounded by the offset)."""
    for outcome in outcomes:
        for item in outcome.evidence:
            if item.text or item.offset < 0:
                continue
            source = sources.get(item.file_id)
            if not is_path(source):
                continue
            line = read_line_at(source, item.offset)
            if line is None:
                continue
            item.text = evidence_text(line.split(b"\r", 1)[0])  # a lone CR ended the line
