"""`trainwreck explain LOG... RULE`: why one rule did or did not fire on a log.

    trainwreck explain train.log nccl-error-backend [--format text|json] [--rules PATH]

The tool a rule author uses to fix a miss: for the given logs and one rule it shows which matcher
hit which lines (and, for a matcher that hit nothing, the lines that hold its literal text but
not the whole pattern: the near misses), the series extracted per rank, each detector's outputs,
the value of every name and field the condition uses, and the condition's verdict. Lines are
read through the same paste-shape layer as `diagnose`. Exit 0 when the rule fired, 1 when it did
not, 2 on usage errors (unknown rule, no such file).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from trainwreck.errors import UsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.sanitize import report_text

MAX_LINES = 8  # lines shown per matcher
NEAR_MISS_BYTES = 8 << 20  # how much of each log is searched for near misses


def explain(
    paths: list[str],
    rule_id: str,
    root: str | Path = ".",
    *,
    rules: list[str] | None = None,
    use_installed: bool = True,
    kb: KnowledgeBase | None = None,
) -> dict[str, Any]:
    """The explanation as a JSON-able dict. Raises UsageError on bad input. `kb`: the
    checkout's knowledge base when the caller has it."""
    import numpy as np

    from trainwreck.diagnose import expand_inputs
    from trainwreck.rules import condition as cond
    from trainwreck.rules import engine as eng
    from trainwreck.rules.bundle import resolve

    # A BundleError is a UsageError: an unreadable --rules bundle is reported as such.
    rule_set = resolve(Path(root), rules, use_installed=use_installed, source=kb)
    matching = [r for r in rule_set.rules if r["id"] == rule_id]
    if not matching:
        known = ", ".join(sorted(r["id"] for r in rule_set.rules)[:8])
        raise UsageError(f"no rule '{rule_id}' (known rules include: {known}, ...)")
    rule = matching[0]
    inputs, missing = expand_inputs(paths)
    if missing:
        raise UsageError("no such file or folder: " + ", ".join(missing))
    if not inputs:
        raise UsageError("no log files to read")
    scan = eng.Engine([rule]).scan(inputs, jobs=1)
    run = scan.runs[0]
    outcome = eng.evaluate(run, scan)
    files = scan.files

    matchers: dict[str, Any] = {}
    for name, state in run.matchers.items():
        numbers = {}
        for field_name, column in state.columns.items():
            values = [v for v in column if isinstance(v, (int, float)) and math.isfinite(v)]
            if values:
                numbers[field_name] = {"min": min(values), "max": max(values), "n": len(values)}
        matchers[name] = {
            "kind": rule["matchers"][name]["kind"],
            "count": state.count,
            "ranks": {str(k): v for k, v in state.rank_counts.items()},
            "lines": [
                {"file": files[e.file], "line": e.line, "rank": _jsonable(e.rank), "text": e.text}
                for e in state.evidence[:MAX_LINES]
            ],
            "numbers": numbers,
        }
        if state.count == 0 and rule["matchers"][name]["kind"] == "regex":
            matchers[name]["near_misses"] = _near_misses(rule["matchers"][name]["regex"], inputs)
    series = {
        name: {
            _series_label(rank, files): {
                "points": int(buffer.points().value.size),
                "min": _number(np.nanmin(buffer.points().value))
                if buffer.points().value.size
                else None,
                "max": _number(np.nanmax(buffer.points().value))
                if buffer.points().value.size
                else None,
            }
            for rank, buffer in per_rank.items()
        }
        for name, per_rank in run.series.items()
    }
    detectors = {
        name: {
            "fired": result.fired,
            "outputs": {k: _number(v) for k, v in result.outputs.items()},
            "ranks": [_jsonable(r) for r in result.ranks],
            "note": result.note,
        }
        for name, result in outcome.detectors.items()
    }
    context = eng.RuleContext(run, outcome.detectors)
    names = {}
    tree = rule.get("condition_ast")
    if tree is not None:
        for name in sorted(cond.referenced_names(tree)):
            names[name] = {"true": context.truth(name), "count": context.count(name)}
        for part, field_name in sorted(cond.referenced_fields(tree)):
            values = context.numbers(part, field_name)
            shown = [_number(v) for v in np.atleast_1d(values)[:MAX_LINES]]
            names[f"{part}.{field_name}"] = {"values": shown}
    why = _why(rule, outcome.fired, names)
    return {
        "rule": {
            "id": rule["id"],
            "entry": rule["entry"],
            "title": rule["title"],
            "condition": rule["condition"],
        },
        "fired": outcome.fired,
        "confidence": round(outcome.confidence, 3) if outcome.fired else None,
        "why": why,
        "condition_names": names,
        "matchers": matchers,
        "series": series,
        "detectors": detectors,
        "lines_read": scan.lines,
        "skipped": [{"file": s.file, "reason": s.reason} for s in scan.skipped],
    }


def _near_misses(pattern: str, inputs: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Lines holding a piece of the literal text the pattern requires that the pattern does not
    match: where a new wording of the same message usually hides."""
    import re2

    from trainwreck.rules import prefixes, regexes
    from trainwreck.rules.reading import read_head

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
    found: list[dict[str, Any]] = []
    for display, source in inputs:
        data = read_head(source, NEAR_MISS_BYTES)
        if data is None:
            continue
        for number, line in enumerate(prefixes.normalize_block(data).split(b"\n"), 1):
            body = prefixes.split_prefix(line)[1]
            if literal.search(body) and not full.search(body):
                text = body.decode("utf-8", "replace")[:200]
                found.append({"file": display, "line": number, "text": text})
                if len(found) >= MAX_LINES:
                    return found
    return found


def _series_label(rank: Any, files: list[str]) -> str:
    """A series' rank, or for lines without one, the file they come from."""
    file_id = getattr(rank, "file", None)  # state.UnrankedFile
    return f"unranked ({files[file_id]})" if isinstance(file_id, int) else str(rank)


def _why(rule: dict[str, Any], fired: bool, names: dict[str, Any]) -> str:
    true = [n for n, v in names.items() if v.get("true")]
    false = [n for n, v in names.items() if "true" in v and not v["true"]]
    verdict = "fired" if fired else "did not fire"
    parts = [f"rule {verdict}: condition `{rule['condition'].strip()}` is {str(fired).lower()}"]
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


def format_text(data: dict[str, Any]) -> str:
    rule = data["rule"]
    out = [
        f"rule {report_text(rule['id'])} ({report_text(rule['entry'])}): "
        f"{report_text(rule['title'])}",
        f"  condition: {rule['condition'].strip()}",
    ]
    out.append(f"  {data['why']}")
    if data["fired"]:
        out.append(f"  confidence {data['confidence']:.2f}")
    out.append("")
    out.append("matchers:")
    for name, info in data["matchers"].items():
        ranks = ", ".join(f"{k}: {v}" for k, v in info["ranks"].items() if k != "None")
        out.append(
            f"  {name} ({info['kind']}): {info['count']} line(s)"
            + (f", by rank {ranks}" if ranks else "")
        )
        for line in info["lines"]:
            out.append(f"    {report_text(line['file'])}:{line['line']}: {_shown(line['text'])}")
        for field_name, stats in info["numbers"].items():
            out.append(
                f"    {field_name}: {stats['n']} value(s), {stats['min']:g} .. {stats['max']:g}"
            )
        for miss in info.get("near_misses", []):
            out.append(
                f"    near miss {report_text(miss['file'])}:{miss['line']}: {_shown(miss['text'])}"
            )
    if data["series"]:
        out += ["", "series:"]
        for name, per_rank in data["series"].items():
            if not per_rank:
                out.append(f"  {name}: no points")
            for rank, info in per_rank.items():
                out.append(
                    f"  {name} rank {rank}: {info['points']} point(s), {info['min']} .. {info['max']}"
                )
    if data["detectors"]:
        out += ["", "detectors:"]
        for name, info in data["detectors"].items():
            outputs = ", ".join(f"{k}={v:g}" for k, v in info["outputs"].items() if v is not None)
            out.append(
                f"  {name}: {'fired' if info['fired'] else 'not fired'}"
                + (f" ({outputs})" if outputs else "")
            )
            if info["note"]:
                out.append(f"    {info['note']}")
    out += ["", "condition names:"]
    for name, info in data["condition_names"].items():
        if "true" in info:
            out.append(f"  {name} = {str(info['true']).lower()} (count {info['count']:g})")
        else:
            out.append(f"  {name} = {info['values']}")
    for skipped in data["skipped"]:
        out.append(f"skipped {report_text(skipped['file'])}: {report_text(skipped['reason'])}")
    return "\n".join(out) + "\n"


def _shown(text: str) -> str:
    from trainwreck.rules.engine import evidence_text

    return evidence_text(text.encode("utf-8", "replace"))[:200]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "args",
        nargs="+",
        metavar="LOG... RULE",
        help="log files (or folders, globs) then the rule id",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--rules", action="append", metavar="PATH", help="a rule bundle or rules folder to use"
    )
    parser.add_argument("--no-installed", action="store_true", help="ignore installed rule packs")


def run(args: argparse.Namespace) -> int:
    if len(args.args) < 2:
        raise UsageError("explain needs LOG... RULE (at least one log and a rule id)")
    *paths, rule_id = args.args
    data = explain(
        paths,
        rule_id,
        args.root,
        rules=args.rules,
        use_installed=not args.no_installed,
        kb=KnowledgeBase.load(args.root),
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(format_text(data))
    return 0 if data["fired"] else 1
