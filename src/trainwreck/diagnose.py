"""`trainwreck diagnose PATH...`: which failure is in these logs, how sure, who started it, the fix.

Python API (used by tests, compile and other stages):

    from trainwreck.diagnose import diagnose
    report = diagnose(["logs/"], root=".")        # Report: .findings, .skipped, .to_json()

Only the core dependencies are imported (numpy, re2, pyyaml/jsonschema when rules are compiled
from a checkout): never torch, jupyter or mkdocs, so it runs on a bare ops machine.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainwreck import engine as eng
from trainwreck import errors, formats
from trainwreck.compile.bundle import BundleError
from trainwreck.compile.packs import RuleSet, resolve
from trainwreck.engine.detectors import rank_sort_key
from trainwreck.engine.measured import measured
from trainwreck.engine.parallel import usable_cpus
from trainwreck.errors import InternalError, NothingRead, UsageError
from trainwreck.findings import Competing, Evidence, Finding, Report, Skipped, Stats, Suggestion
from trainwreck.forensics import report as hang
from trainwreck.inputs import expand_inputs
from trainwreck.knowledge import KnowledgeBase, relations
from trainwreck.memory.advice import replay_notes
from trainwreck.rules.rule import Rule, read_rules
from trainwreck.sanitize import report_text

# Exit status (trainwreck/errors.py). A crash must never look like "findings" (1) to a script.
EXIT_NOTHING_FOUND = errors.EXIT_OK
EXIT_FINDINGS = errors.EXIT_PROBLEMS
EXIT_USAGE = errors.EXIT_USAGE
EXIT_NOTHING_READ = errors.EXIT_NOTHING_READ
EXIT_INTERNAL_ERROR = errors.EXIT_INTERNAL
EXIT_CODES_HELP = (
    "exit status: 0 when nothing is found, 1 with findings, 2 on usage errors, "
    "3 when no input could be read, 4 on an internal error"
)


# --- findings -------------------------------------------------------------------------------------


def _clean(value: float) -> float | None:
    return round(value, 4) if isinstance(value, float) and math.isfinite(value) else None


def build_findings(
    outcomes: list[eng.RuleOutcome], scan: eng.ScanResult, entries: dict[str, dict[str, Any]]
) -> list[Finding]:
    """One finding per entry whose rules fired (their confidences combined), in report order."""
    by_entry: dict[str, list[eng.RuleOutcome]] = {}
    for outcome in outcomes:
        if outcome.fired:
            by_entry.setdefault(outcome.rule.entry, []).append(outcome)
    runs = {run.rule.id: run for run in scan.runs}
    findings: list[Finding] = []
    for entry_id, group in by_entry.items():
        group.sort(key=lambda o: -o.confidence)
        best = group[0]
        miss = 1.0
        for outcome in group:
            miss *= 1.0 - outcome.confidence
        confidence = min(0.99, 1.0 - miss)
        summary = entries.get(entry_id, {})
        ranks: set[Any] = set()
        for outcome in group:
            ranks.update(outcome.ranks)
        initiating = next((o.initiating_rank for o in group if o.initiating_rank is not None), None)
        reasons = []
        for outcome in group:
            parts = [f"{outcome.rule.id}: confidence {outcome.rule.confidence:.2f}"]
            parts += [f"+{amount:.2f} ({part})" for part, amount in outcome.boosts.items()]
            reasons.append(" ".join(parts))
        if len(group) > 1:
            reasons.append(f"{len(group)} rules agree: combined {confidence:.2f}")
        findings.append(
            Finding(
                entry=entry_id,
                rule=best.rule.id,
                rules=tuple(o.rule.id for o in group),
                title=summary.get("title", entry_id),
                rule_title=best.rule.title,
                confidence=round(confidence, 4),
                ranks=tuple(sorted(ranks, key=rank_sort_key)),
                initiating_rank=initiating,
                evidence=_evidence(group),
                root_cause=summary.get("root_cause", ""),
                fix=summary.get("fix", {"title": "", "steps": []}),
                verify=tuple(summary.get("verify", [])),
                url=summary.get("url", ""),
                why=tuple(reasons),
                notes=(*(n for o in group for n in o.notes), *replay_notes(entry_id)),
                detectors={
                    f"{o.rule.id}:{name}": {k: _clean(v) for k, v in result.outputs.items()}
                    for o in group
                    for name, result in o.detectors.items()
                    if result.fired
                },
                quick_answer=summary.get("quick_answer", ""),
                numbers={k: v for o in group[::-1] for k, v in measured(runs[o.rule.id]).items()},
                confirm=summary.get("confirm", {}),
                first=min(o.first_key for o in group),
            )
        )
    return rank_findings(findings, entries)


def _evidence(group: list[eng.RuleOutcome]) -> tuple[Evidence, ...]:
    """The evidence of an entry's rules (most confident first): each rule's own lines up to its
    max_evidence, a line once, and a few more in all for each agreeing rule."""
    evidence: list[Evidence] = []
    seen: set[tuple[int, int]] = set()
    limit = max(o.rule.report.max_evidence for o in group)
    for outcome in group:
        per_rule = 0
        for item in outcome.evidence:
            key = (item.file_id, item.line)
            if key in seen:
                continue
            if per_rule >= outcome.rule.report.max_evidence or len(evidence) >= limit + 4 * (
                len(group) - 1
            ):
                break
            seen.add(key)
            per_rule += 1
            evidence.append(replace(item, part=f"{outcome.rule.id}:{item.part}"))
    return tuple(evidence)


def rank_findings(findings: list[Finding], entries: dict[str, dict[str, Any]]) -> list[Finding]:
    """Order findings: confidence, then earliest evidence; an entry that causes another found
    entry moves before it (the initiating failure first). Adds competing hypotheses."""
    ordered = sorted(findings, key=lambda f: (-f.confidence, f.first, f.entry))
    # Move causes before their effects (stable, bounded passes).
    for _ in range(len(ordered)):
        moved = False
        for i, effect in enumerate(ordered):
            for j in range(i + 1, len(ordered)):
                if relations.causes(entries, ordered[j].entry, effect.entry):
                    ordered.insert(i, ordered.pop(j))
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return [
        replace(
            finding, competing=_competing(finding, position, ordered, entries), rank=position + 1
        )
        for position, finding in enumerate(ordered)
    ]


def _competing(
    finding: Finding, position: int, ordered: list[Finding], entries: dict[str, dict[str, Any]]
) -> tuple[Competing, ...]:
    """Every other finding, and why it ranks above or below this one."""
    competing = []
    for other_position, other in enumerate(ordered):
        if other is finding:
            continue
        relation = relations.declared(entries, finding.entry, other.entry)
        if relations.causes(entries, finding.entry, other.entry):
            why = f"{finding.entry} causes {other.entry}: the initiating failure is named first"
        elif relations.causes(entries, other.entry, finding.entry):
            why = f"{other.entry} causes {finding.entry}: it ranks first as the initiating failure"
        elif other_position > position:
            if other.confidence < finding.confidence:
                why = f"ranks lower: confidence {other.confidence:.2f} < {finding.confidence:.2f}"
            else:
                why = "ranks lower: same confidence, later first evidence"
        elif other.confidence > finding.confidence:
            why = f"ranks higher: confidence {other.confidence:.2f} > {finding.confidence:.2f}"
        else:
            why = "ranks higher: same confidence, earlier first evidence"
        if relation == relations.CONFUSED_WITH:
            why += "; the two are often confused, compare their evidence"
        competing.append(Competing(other.entry, other.confidence, why))
    return tuple(competing)


# --- the API ------------------------------------------------------------------------------------


def diagnose(
    paths: list[str],
    root: str | Path | None = None,
    *,
    rules: list[str] | None = None,
    rule_set: RuleSet | None = None,
    use_installed: bool = True,
    only: set[str] | None = None,
    jobs: int | None = None,
    kb: KnowledgeBase | None = None,
    streams: list[tuple[str, Any]] | None = None,  # (name, binary stream): logs held in memory
    rank_from: str | None = None,
    scanner: Any = None,
) -> Report:
    """Diagnose logs. `paths`: files, folders, globs, .gz files or "-" for stdin.

    Rules: `rule_set` if given, else `rules` (bundle files or rules folders), else the checkout at
    `root` (rules/ compiled in memory) plus installed rule packs. `only`: rule ids to run.
    `jobs`: processes for several large files (None: automatic, 1: serial), at most the CPUs
    this process may use.
    `kb`: the checkout's knowledge base when the caller has it (read only on a cache miss).
    Flight Recorder and stack dumps among the inputs go to trainwreck.forensics (`rank_from`: a
    regex whose first group is the rank in a dump's path).
    `scanner` (scale-out: scaleout.command): scans instead of the engine, through its
    `scan(engine, rules, inputs) -> (ScanResult, inputs its file ids name)`, `rules` the
    bundle mappings of the engine's rules; its `expand(urls)` gives the inputs of the arguments
    that are URLs (fsspec).
    Raises UsageError for paths that name nothing, or when there are no rules.
    """
    started = time.perf_counter()
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: the number of processes must be 1 or more")
    root_path = Path(root) if root is not None else Path(".")
    if rule_set is None:
        try:
            rule_set = resolve(root_path, rules, use_installed=use_installed, source=kb)
        except BundleError as exc:
            raise UsageError(str(exc)) from None
    rules, broken = read_rules(rule_set.rules)
    selected = [r for r in rules if only is None or r.id in only]
    broken = [(name, exc) for name, exc in broken if only is None or name in only]
    if not selected and not broken:
        raise UsageError(
            "no rules to run: install a rule pack (the wheel `trainwreck compile` writes to dist/), run in a checkout, or pass --rules"
        )
    skipped_inputs: list[Skipped] = []
    urls = [p for p in paths if "://" in p] if scanner is not None else []
    inputs, missing = expand_inputs([p for p in paths if p not in urls], skipped_inputs, streams)
    inputs += scanner.expand(urls) if urls else []
    if missing:
        raise UsageError("no such file or folder: " + ", ".join(map(report_text, missing)))
    if not inputs and not any(s.unread for s in skipped_inputs):
        raise UsageError("no log files to read")
    try:
        rank_pattern = re.compile(rank_from) if rank_from else None
    except re.error as exc:
        raise UsageError(f"--rank-from {rank_from!r}: not a regular expression ({exc})") from None
    dumps, inputs = hang.split_inputs(inputs)
    warnings = list(rule_set.warnings)
    if jobs is not None and jobs > (cpus := usable_cpus()):
        warnings.append(
            f"--jobs {jobs}: this process may use {cpus} CPU{'s' if cpus != 1 else ''}; "
            f"using {cpus} process{'es' if cpus != 1 else ''} at most"
        )
    engine = _engine(selected, broken, warnings)
    if engine is None:
        raise UsageError("no usable rules (see the warnings)")
    selected = engine.rules
    if scanner is None:
        scan = engine.scan(inputs, jobs=jobs)
    else:  # (the inputs whose text evidence is read from may differ: merge reads states)
        by_id = {rule["id"]: rule for rule in rule_set.rules}
        scan, inputs = scanner.scan(engine, [by_id[rule.id] for rule in selected], inputs)
    scan.skipped[:0] = skipped_inputs
    return report_of(
        scan, engine, rule_set, inputs, warnings, root_path, started, dumps, rank_pattern
    )


def report_of(
    scan: eng.ScanResult,
    engine: eng.Engine,
    rule_set: RuleSet,
    inputs: list[tuple[str, Any]],
    warnings: list[str],
    root_path: Path,
    started: float,
    dumps: list[tuple[str, Any]] | None = None,
    rank_pattern: re.Pattern[str] | None = None,
) -> Report:
    """The report of a finished scan: its rules evaluated, findings built and ranked (with the
    hang dumps' findings), evidence read from `inputs` (by file id)."""
    selected, dumps = engine.rules, dumps or []
    outcomes = []
    for run in scan.runs:
        try:
            outcomes.append(eng.evaluate(run, scan))
        except Exception as exc:  # a malformed rule from a third-party pack must not stop the rest
            warnings.append(
                f"rule '{run.rule.id}' failed while evaluating and was skipped: {exc!r}"
            )
    fired = [o for o in outcomes if o.fired]
    eng.fill_evidence_text(fired, {i: source for i, (_, source) in enumerate(inputs)})
    findings = build_findings(fired, scan, rule_set.entries)
    if dumps:
        findings = hang.merge(
            findings, dumps, rule_set.entries, rank_pattern, scan.skipped, warnings
        )
        findings = rank_findings(findings, rule_set.entries)
    findings = link_local_pages(findings, root_path)
    skipped = _dedupe(scan.skipped)
    elapsed = time.perf_counter() - started
    unread = {s.file for s in scan.skipped if s.unread}
    unread |= {s.file for s in scan.skipped if s.unread and s.file in dict(dumps)}
    read_files = [*scan.files, *dict(dumps)]
    stats = Stats(
        files=len(read_files),
        lines=scan.lines,
        bytes=scan.bytes,
        seconds=round(elapsed, 3),
        rules=len(selected),
        rule_sources=tuple(rule_set.sources),
    )
    report = Report(
        findings, skipped, warnings, stats, suggestions=_suggestions(findings, inputs, rule_set)
    )
    report.nothing_read = all(f in unread for f in read_files)
    return report


def link_local_pages(findings: list[Finding], root: Path) -> list[Finding]:
    """Without a published site, point each finding at its page in the local build
    (site/entries/<id>/index.html from `trainwreck build`) when there is one, else at nothing."""
    linked = []
    for finding in findings:
        if not finding.url:
            page = root / "site" / "entries" / str(finding.entry) / "index.html"
            finding = replace(finding, url=page.resolve().as_uri() if page.is_file() else "")
        linked.append(finding)
    return linked


def _suggestions(
    findings: list[Finding], inputs: list[tuple[str, Any]], rule_set: RuleSet
) -> list[Suggestion]:
    """Closest entries by text similarity, only when no rule fired and the log has error lines."""
    if findings or not rule_set.text_index:
        return []
    from trainwreck.engine import suggest

    lines = suggest.error_lines(inputs)
    if not lines:
        return []
    return suggest.suggest(lines, suggest.Index.from_counts(rule_set.text_index))


def _engine(
    rules: list[Rule], broken: list[tuple[str, Exception]], warnings: list[str]
) -> eng.Engine | None:
    """The engine of the rules it can load; a malformed rule in a bundle (a hand-edited or
    foreign pack: `broken`, those that could not be read) is skipped with a warning instead of
    failing the whole diagnosis. None when no rule is usable."""
    for name, exc in broken:
        warnings.append(f"rule '{name}' in the bundle is malformed and was skipped: {exc!r}")
    if not rules:
        return None
    try:
        return eng.Engine(rules)
    except Exception:
        pass
    usable = []
    for rule in rules:
        try:
            eng.Engine([rule])
            usable.append(rule)
        except Exception as exc:
            warnings.append(f"rule '{rule.id}' in the bundle is malformed and was skipped: {exc!r}")
    return eng.Engine(usable) if usable else None


def _dedupe(skipped: list[Skipped]) -> list[Skipped]:
    counts = Counter((item.file, item.reason) for item in skipped)
    return [Skipped(f, r if n == 1 else f"{r} ({n} times)") for (f, r), n in counts.items()]


# --- CLI ---------------------------------------------------------------------------------------


def add_report_options(parser: argparse.ArgumentParser, *, rules_help: str) -> None:
    """The options that choose the rules and shape the report: diagnose's and merge's."""
    parser.add_argument(
        "--format",
        choices=tuple(formats.FORMATS),
        default="text",
        help="output format: " + "; ".join(f"{f.name} {f.help}" for f in formats.FORMATS.values()),
    )
    parser.add_argument("--rules", action="append", metavar="PATH", help=rules_help)
    parser.add_argument("--no-installed", action="store_true", help="ignore installed rule packs")
    parser.add_argument(
        "--rule", action="append", metavar="ID", help="run only this rule (repeatable)"
    )
    parser.add_argument(
        "--min-confidence", type=float, default=0.0, help="hide findings below this confidence"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also each finding's rules, reasons, notes"
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_CODES_HELP + "."
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="log files, folders, globs, .gz files, or - for stdin",
    )
    add_report_options(
        parser,
        rules_help="a rule bundle (JSON) or rules folder to use instead of the checkout and "
        "installed packs (repeatable)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="processes for several large files, at most the CPUs this process may use "
        "(default: automatic; 1: serial)",
    )
    parser.add_argument(
        "--rank-from",
        metavar="REGEX",
        help="the rank of a Flight Recorder or stack dump: the first group of REGEX in its path "
        "(default: the dump's own field, else the file name's last number)",
    )
    from trainwreck.scaleout.command import add_diagnose_options

    add_diagnose_options(parser)


def run(args: argparse.Namespace) -> int:
    from trainwreck.scaleout import command as scaleout

    scanner = scaleout.scanner_of(args)
    scaleout.print_quick_verdict(args)
    try:
        report = diagnose(
            args.paths,
            args.root,
            rules=args.rules,
            use_installed=not args.no_installed,
            only=set(args.rule) if args.rule else None,
            jobs=args.jobs,
            kb=KnowledgeBase.load(args.root),
            rank_from=args.rank_from,
            scanner=scanner,
        )
        if isinstance(scanner, scaleout.PartialScanner):
            return scaleout.report_partial(scanner, report)
        for warning in report.warnings:
            print(f"trainwreck: warning: {report_text(warning)}", file=sys.stderr)
        report.findings = [f for f in report.findings if f.confidence >= args.min_confidence]
        text = formats.render(report, args.format, verbose=args.verbose)
    except (errors.TrainwreckError, KeyboardInterrupt, BrokenPipeError, MemoryError):
        raise
    except Exception as exc:  # a bug: one line, and never the findings code
        raise InternalError(
            f"internal error while diagnosing ({type(exc).__name__}: {exc}); "
            "please report it with the command line"
        ) from exc
    sys.stdout.write(text)
    sys.stdout.flush()
    if report.nothing_read:
        raise NothingRead("no input could be read")
    return EXIT_FINDINGS if report.findings else EXIT_NOTHING_FOUND
