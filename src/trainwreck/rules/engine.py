"""The diagnosis engine, as one import: the compiled rule set and its scan, and rule evaluation.

The engine is split by job (dependencies point down this list):

- `scanning`: `Engine`, the compiled rule set, streams inputs through the patterns;
- `parallel`: several large files, or parts of one, scanned in forked processes and merged;
- `store`: matches recorded into each rule's state, per line or per batch;
- `state`: that state (matchers, series buffers, evidence) and the limits that bound it;
- `captures`: named captures converted by the matchers' units;
- `lineinfo`: a line's rank and time; `prefixes`: the paste-shape layer under it;
- `reading`: files, stdin and gzip in blocks of whole lines, evidence text;
- `evaluation`: detectors, condition, confidence, evidence and the initiating rank of a rule.
"""

from __future__ import annotations

from trainwreck.rules.evaluation import RuleContext, RuleOutcome, evaluate, fill_evidence_text
from trainwreck.rules.lineinfo import parse_time, rank_from_path, rank_number, split_prefix
from trainwreck.rules.reading import MAX_LINE, GzipDamage, evidence_text, lone_cr_to_lf
from trainwreck.rules.scanning import Engine
from trainwreck.rules.state import (
    MAX_EVIDENCE_PER_MATCHER,
    MAX_RANKS,
    MAX_ROWS,
    SERIES_BUDGET,
    Evidence,
    MatcherState,
    RuleRun,
    ScanResult,
    SeriesBuffer,
    Skipped,
)

__all__ = [
    "MAX_EVIDENCE_PER_MATCHER",
    "MAX_LINE",
    "MAX_RANKS",
    "MAX_ROWS",
    "SERIES_BUDGET",
    "Engine",
    "Evidence",
    "GzipDamage",
    "MatcherState",
    "RuleContext",
    "RuleOutcome",
    "RuleRun",
    "ScanResult",
    "SeriesBuffer",
    "Skipped",
    "evaluate",
    "evidence_text",
    "fill_evidence_text",
    "lone_cr_to_lf",
    "parse_time",
    "rank_from_path",
    "rank_number",
    "split_prefix",
]
