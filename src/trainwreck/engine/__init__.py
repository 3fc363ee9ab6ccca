"""The diagnosis engine: the runtime that reads logs through compiled rules and judges them.

Its public API is small: `Engine(rules)` compiles a rule set once; `Engine.scan(inputs)` reads
logs into a `ScanResult` (the state of every rule, with the files read and those skipped);
`evaluate(run, scan)` turns one rule's state into a `RuleOutcome`; `fill_evidence_text` reads
the text of evidence known only by position. The rules themselves (their language, validation
and registry) live in `trainwreck.rules`, which this package reads and never changes.

The modules, each one job (dependencies point down this list):

- `scanning`: `Engine`, the compiled rule set, streams inputs through the patterns;
- `parallel`: several large files, or parts of one, scanned in forked processes and merged;
- `shapes`: what the lines of a busy block have in common, worked out once per shape;
- `store`: the one recorder: matches recorded into each rule's state, rows in line order;
- `rows`: the rows it reads: a busy block's lines read through their shapes (`Batch`), or a
  line read on its own (`OneLine`, a batch of one);
- `state`: that state (matchers, series buffers, evidence) and the limits that bound it;
- `patterns`: every distinct pattern once, the RE2 set and the prefilter;
- `matching`: the runtime of every matcher kind (what a line it matches records);
- `tracebacks`: a traceback read as one unit per file and rank, judged once it is over;
- `captures`: named captures converted by the matchers' units;
- `lineinfo`: a line's rank and time; `prefixes`: the paste-shape layer under it;
- `reading`: files, stdin and gzip in blocks of whole lines, evidence text; `sources`: the
  streams it reads (gzip, a byte range, a file bounded by its size, a polled FIFO); `text`: the
  one rule for what is text (NUL runs, leading garbage, UTF-16/32 by their BOM);
- `evaluation`: detectors, condition, confidence, evidence and the initiating rank of a rule;
- `measured`: the numbers a fired rule's condition compared, as a report shows them;
- `detectors`: the detectors' numeric code, one function per kind of `rules.registry`;
- `suggest`: the closest entries to a log's error lines when no rule fires.
"""

from __future__ import annotations

from trainwreck.engine.evaluation import RuleContext, RuleOutcome, evaluate, fill_evidence_text
from trainwreck.engine.scanning import Engine
from trainwreck.engine.state import RuleRun, ScanResult

__all__ = [
    "Engine",
    "RuleContext",
    "RuleOutcome",
    "RuleRun",
    "ScanResult",
    "evaluate",
    "fill_evidence_text",
]
