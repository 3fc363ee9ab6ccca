"""`trainwreck explain LOG... RULE`: why one rule did or did not fire on a log.

    trainwreck explain train.log nccl-error-backend [--format text|json] [--rules PATH]
    trainwreck explain flight-recorder DUMP... [--rank-from REGEX]   (the alignment table)
    trainwreck explain train.log nccl-error        (an entry id: each of its rules)

The tool a rule author uses to fix a miss: for the given logs and one rule it shows which matcher
hit which lines (and, for a matcher that hit nothing, the lines that hold its literal text but
not the whole pattern: the near misses), the series extracted per rank, each detector's outputs,
the value of every name and field the condition uses, and the condition's verdict. Lines are
read through the same paste-shape layer as `diagnose`. Exit 0 when the rule (for an entry id:
any of its rules) fired, 1 when it did not, 2 on usage errors (unknown rule, no such file).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwreck.errors import UsageError
from trainwreck.findings import Skipped
from trainwreck.knowledge import KnowledgeBase
from trainwreck.sanitize import report_text

if TYPE_CHECKING:
    from trainwreck.compile.packs import RuleSet
    from trainwreck.rules.rule import Rule

MAX_LINES = 8  # lines shown per matcher
NEAR_MISS_BYTES = 8 << 20  # how much of each log is searched for near misses


@dataclass(frozen=True)
class Line:
    """A line of a log as explain shows it (a matcher's line, or a near miss)."""

    file: str
    line: int
    text: str
    rank: Any = None  # (near misses carry none)

    def to_json(self, with_rank: bool = True) -> dict[str, Any]:
        if with_rank:
            return {"file": self.file, "line": self.line, "rank": self.rank, "text": self.text}
        return {"file": self.file, "line": self.line, "text": self.text}


@dataclass(frozen=True)
class Spread:
    """The finite values of a capture (or a series): how many, the least and the largest."""

    min: float | None
    max: float | None
    n: int

    def to_json(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "n": self.n}


@dataclass(frozen=True)
class MatcherExplained:
    kind: str
    count: int
    ranks: Mapping[str, int]  # lines per rank (the rank as text)
    lines: tuple[Line, ...]  # the first MAX_LINES
    numbers: Mapping[str, Spread]  # per kept capture
    near_misses: tuple[Line, ...] | None = None  # for a regex matcher that matched nothing

    def to_json(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "count": self.count,
            "ranks": dict(self.ranks),
            "lines": [line.to_json() for line in self.lines],
            "numbers": {name: spread.to_json() for name, spread in self.numbers.items()},
        }
        if self.near_misses is not None:
            out["near_misses"] = [line.to_json(with_rank=False) for line in self.near_misses]
        return out


@dataclass(frozen=True)
class DetectorExplained:
    fired: bool
    outputs: Mapping[str, float | None]
    ranks: tuple[Any, ...]
    note: str

    def to_json(self) -> dict[str, Any]:
        return {
            "fired": self.fired,
            "outputs": dict(self.outputs),
            "ranks": list(self.ranks),
            "note": self.note,
        }


@dataclass(frozen=True)
class NameValue:
    """What a name of the condition reads: a part's truth and count, or a field's values."""

    true: bool | None = None
    count: float | None = None
    values: tuple[float | None, ...] | None = None  # a field (part.field): its first values

    def to_json(self) -> dict[str, Any]:
        if self.values is not None:
            return {"values": list(self.values)}
        return {"true": self.true, "count": self.count}


@dataclass(frozen=True)
class Explanation:
    """Why one rule did or did not fire on some logs (`to_json`: the JSON output's shape)."""

    rule: Mapping[str, str]  # id, entry, title, condition
    fired: bool
    confidence: float | None  # when it fired
    why: str
    condition_names: Mapping[str, NameValue]
    matchers: Mapping[str, MatcherExplained]
    series: Mapping[str, Mapping[str, Spread]]  # per series, per rank: its points
    detectors: Mapping[str, DetectorExplained]
    lines_read: int
    skipped: tuple[Skipped, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": dict(self.rule),
            "fired": self.fired,
            "confidence": self.confidence,
            "why": self.why,
            "condition_names": {k: v.to_json() for k, v in self.condition_names.items()},
            "matchers": {k: v.to_json() for k, v in self.matchers.items()},
            "series": {
                name: {rank: _series_json(spread) for rank, spread in per_rank.items()}
                for name, per_rank in self.series.items()
            },
            "detectors": {k: v.to_json() for k, v in self.detectors.items()},
            "lines_read": self.lines_read,
            "skipped": [item.to_json() for item in self.skipped],
        }


def _series_json(spread: Spread) -> dict[str, Any]:
    return {"points": spread.n, "min": spread.min, "max": spread.max}


def explain(
    paths: list[str],
    rule_id: str,
    root: str | Path = ".",
    *,
    rules: list[str] | None = None,
    use_installed: bool = True,
    kb: KnowledgeBase | None = None,
    rule_set: RuleSet | None = None,
    streams: list[tuple[str, Any]] | None = None,
) -> Explanation:
    """Why the rule did or did not fire (for an entry id: its first rule; `explain_all` gives
    each). Raises UsageError on bad input. `kb`: the checkout's knowledge base when the caller
    has it; `rule_set`: the rules, when the caller has them resolved; `streams`: (display name,
    binary stream) of logs held in memory."""
    return explain_all(
        paths,
        rule_id,
        root,
        rules=rules,
        use_installed=use_installed,
        kb=kb,
        rule_set=rule_set,
        streams=streams,
    )[0]


def explain_all(
    paths: list[str],
    wanted: str,
    root: str | Path = ".",
    *,
    rules: list[str] | None = None,
    use_installed: bool = True,
    kb: KnowledgeBase | None = None,
    rule_set: RuleSet | None = None,
    streams: list[tuple[str, Any]] | None = None,
) -> list[Explanation]:
    """Why each rule `wanted` names (a rule id, or an entry id: all its rules) did or did not
    fire on the logs. Raises UsageError on bad input, with the close ids for an unknown one."""
    from trainwreck.inputs import expand_inputs
    from trainwreck.rule_list import load_rules, pick_rules

    chosen = pick_rules(
        load_rules(root, rules, use_installed=use_installed, kb=kb, rule_set=rule_set), wanted
    )
    inputs, missing = expand_inputs(paths, streams=streams)
    if missing:
        raise UsageError("no such file or folder: " + ", ".join(missing))
    if not inputs:
        raise UsageError("no log files to read")
    return [_explain_rule(rule, inputs) for rule in chosen]


def _explain_rule(rule: Rule, inputs: list[tuple[str, Any]]) -> Explanation:
    import numpy as np

    from trainwreck import engine as eng
    from trainwreck.engine.evaluation import CUT_NOTE_START
    from trainwreck.rules import condition as cond
    from trainwreck.rules.matchers import RegexMatcher

    scan = eng.Engine([rule]).scan(inputs, jobs=1)
    run = scan.runs[0]
    outcome = eng.evaluate(run, scan)
    files = scan.files

    matchers: dict[str, MatcherExplained] = {}
    for name, state in run.matchers.items():
        numbers = {}
        for field_name, column in state.columns.items():
            values = [v for v in column if isinstance(v, (int, float)) and math.isfinite(v)]
            if values:
                numbers[field_name] = Spread(min(values), max(values), len(values))
        matcher = rule.matchers[name]
        near = None
        if state.count == 0 and isinstance(matcher, RegexMatcher):
            near = tuple(_near_misses(matcher.regex, inputs))
        matchers[name] = MatcherExplained(
            matcher.kind.value,
            state.count,
            {str(k): v for k, v in state.rank_counts.items()},
            tuple(
                Line(e.file, e.line, e.text, _jsonable(e.rank)) for e in state.evidence[:MAX_LINES]
            ),
            numbers,
            near,
        )
    series = {
        name: {
            _series_label(rank, files): _spread(buffer.points().value)
            for rank, buffer in per_rank.items()
        }
        for name, per_rank in run.series.items()
    }
    detectors = {
        name: DetectorExplained(
            result.fired,
            {k: _number(v) for k, v in result.outputs.items()},
            tuple(_jsonable(r) for r in result.ranks),
            result.note,
        )
        for name, result in outcome.detectors.items()
    }
    context = eng.RuleContext(run, outcome.detectors)
    names: dict[str, NameValue] = {}
    tree = rule.condition_tree
    if tree is not None:
        for name in sorted(cond.referenced_names(tree)):
            names[name] = NameValue(true=context.truth(name), count=context.count(name))
        for part, field_name in sorted(cond.referenced_fields(tree)):
            values = context.numbers(part, field_name)
            shown = tuple(_number(v) for v in np.atleast_1d(values)[:MAX_LINES])
            names[f"{part}.{field_name}"] = NameValue(values=shown)
    return Explanation(
        {
            "id": rule.id,
            "entry": rule.entry,
            "title": rule.title,
            "condition": rule.condition,
        },
        outcome.fired,
        round(outcome.confidence, 3) if outcome.fired else None,
        # (a finding on cut tracebacks alone says so here too)
        "; ".join(
            [_why(rule, outcome.fired, names)]
            + [note for note in outcome.notes if note.startswith(CUT_NOTE_START)]
        ),
        names,
        matchers,
        series,
        detectors,
        scan.lines,
        tuple(scan.skipped),
    )


def _spread(values: Any) -> Spread:
    """A series' points: how many, and the least and largest of the finite ones."""
    import numpy as np

    if not values.size:
        return Spread(None, None, 0)
    return Spread(_number(np.nanmin(values)), _number(np.nanmax(values)), int(values.size))


def _near_misses(pattern: str, inputs: list[tuple[str, Any]]) -> list[Line]:
    """Lines holding a piece of the literal text the pattern requires that the pattern does not
    match: where a new wording of the same message usually hides."""
    import re2

    from trainwreck.engine import prefixes
    from trainwreck.engine.reading import read_head
    from trainwreck.rules import regexes

    options, ignore_case = regexes.literal_options(pattern)
    if not options:
        return []
    # Any piece of literal text the pattern requires (pieces of 8 characters or more).
    pieces = sorted({x for link in options for x in link if len(x) >= 8})
    if not pieces:
        return []
    body_pattern = "|".join(re2.escape(x) for x in pieces)
    literal = re2.compile(f"(?i:{body_pattern})" if ignore_case else body_pattern)
    full = regexes.compile(pattern)
    found: list[Line] = []
    for display, source in inputs:
        data = read_head(source, NEAR_MISS_BYTES)
        if data is None:
            continue
        for number, line in enumerate(prefixes.normalize_block(data).split(b"\n"), 1):
            body = prefixes.split_prefix(line)[1]
            if literal.search(body) and not full.search(body):
                text = body.decode("utf-8", "replace")[:200]
                found.append(Line(display, number, text))
                if len(found) >= MAX_LINES:
                    return found
    return found


def _series_label(rank: Any, files: list[str]) -> str:
    """A series' rank, or for lines without one, the file they come from."""
    file_id = getattr(rank, "file", None)  # state.UnrankedFile
    return f"unranked ({files[file_id]})" if isinstance(file_id, int) else str(rank)


def _why(rule: Rule, fired: bool, names: dict[str, NameValue]) -> str:
    true = [n for n, v in names.items() if v.values is None and v.true]
    false = [n for n, v in names.items() if v.values is None and not v.true]
    verdict = "fired" if fired else "did not fire"
    parts = [f"rule {verdict}: condition `{rule.condition.strip()}` is {str(fired).lower()}"]
    if true:
        parts.append("true: " + ", ".join(true))
    if false:
        parts.append("false: " + ", ".join(false))
    return "; ".join(parts)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, str)) else str(value)


def format_text(data: Explanation) -> str:
    rule = data.rule
    out = [
        f"rule {report_text(rule['id'])} ({report_text(rule['entry'])}): "
        f"{report_text(rule['title'])}",
        f"  condition: {rule['condition'].strip()}",
    ]
    out.append(f"  {data.why}")
    if data.fired:
        out.append(f"  confidence {data.confidence:.2f}")
    out.append("")
    out.append("matchers:")
    for name, info in data.matchers.items():
        ranks = ", ".join(f"{k}: {v}" for k, v in info.ranks.items() if k != "None")
        out.append(
            f"  {name} ({info.kind}): {info.count} line(s)"
            + (f", by rank {ranks}" if ranks else "")
        )
        for line in info.lines:
            out.append(f"    {report_text(line.file)}:{line.line}: {_shown(line.text)}")
        for field_name, stats in info.numbers.items():
            out.append(f"    {field_name}: {stats.n} value(s), {stats.min:g} .. {stats.max:g}")
        for miss in info.near_misses or ():
            out.append(f"    near miss {report_text(miss.file)}:{miss.line}: {_shown(miss.text)}")
    if data.series:
        out += ["", "series:"]
        for name, per_rank in data.series.items():
            if not per_rank:
                out.append(f"  {name}: no points")
            for rank, spread in per_rank.items():
                out.append(
                    f"  {name} rank {rank}: {spread.n} point(s), {spread.min} .. {spread.max}"
                )
    if data.detectors:
        out += ["", "detectors:"]
        for name, found in data.detectors.items():
            outputs = ", ".join(f"{k}={v:g}" for k, v in found.outputs.items() if v is not None)
            out.append(
                f"  {name}: {'fired' if found.fired else 'not fired'}"
                + (f" ({outputs})" if outputs else "")
            )
            if found.note:
                out.append(f"    {found.note}")
    out += ["", "condition names:"]
    for name, value in data.condition_names.items():
        if value.values is None:
            out.append(f"  {name} = {str(value.true).lower()} (count {value.count:g})")
        else:
            out.append(f"  {name} = {list(value.values)}")
    for skipped in data.skipped:
        out.append(f"skipped {report_text(skipped.file)}: {report_text(skipped.reason)}")
    return "\n".join(out) + "\n"


def _shown(text: str) -> str:
    from trainwreck.engine.reading import evidence_text

    return evidence_text(text.encode("utf-8", "replace"))[:200]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "args",
        nargs="+",
        metavar="LOG... RULE",
        help="log files (or folders, globs) then a rule id, or an entry id for all its rules "
        "(`trainwreck rules` lists them)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--rules", action="append", metavar="PATH", help="a rule bundle or rules folder to use"
    )
    parser.add_argument("--no-installed", action="store_true", help="ignore installed rule packs")
    parser.add_argument(
        "--rank-from", metavar="REGEX", help="flight-recorder: the rank is REGEX's first group"
    )


def run(args: argparse.Namespace) -> int:
    if args.args and args.args[0] == "flight-recorder":
        return _flight_recorder(args)
    if len(args.args) < 2:
        raise UsageError("explain needs LOG... RULE (at least one log and a rule id)")
    *paths, wanted = args.args
    found = explain_all(
        paths,
        wanted,
        args.root,
        rules=args.rules,
        use_installed=not args.no_installed,
        kb=KnowledgeBase.load(args.root),
    )
    if args.format == "json":
        # One rule: its explanation; an entry id: the explanations of all its rules.
        shown = found[0].to_json() if len(found) == 1 else [x.to_json() for x in found]
        sys.stdout.write(json.dumps(shown, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(format_text(data) for data in found))
    return 0 if any(data.fired for data in found) else 1


def _flight_recorder(args: argparse.Namespace) -> int:
    """`explain flight-recorder DUMP...`: the dumps' alignment table; exit 0 when they show a
    hang's culprit or cause, 1 when they show none, 3 when no dump could be read."""
    import re

    from trainwreck.errors import NothingRead
    from trainwreck.forensics import report, table
    from trainwreck.inputs import expand_inputs

    if len(args.args) < 2:
        raise UsageError("explain flight-recorder needs DUMP... (dump files or folders)")
    try:
        pattern = re.compile(args.rank_from) if args.rank_from else None
    except re.error as exc:
        raise UsageError(f"--rank-from: not a regular expression ({exc})") from None
    inputs, missing = expand_inputs(args.args[1:])
    if missing:
        raise UsageError("no such file or folder: " + ", ".join(map(report_text, missing)))
    found = report.analyse([(d, s) for d, s in inputs if isinstance(s, str)], pattern)
    if not found.traces and not found.stack_dumps:
        sys.stdout.write(table.format_text(found))
        raise NothingRead("no Flight Recorder or stack dump could be read")
    if args.format == "json":
        sys.stdout.write(json.dumps(table.to_json(found), indent=2) + "\n")
    else:
        sys.stdout.write(table.format_text(found))
    return 0 if report.conclude(found) else 1
