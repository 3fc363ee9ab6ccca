"""Scale-out on the command line: `trainwreck diagnose --partial OUT.state PATH...` saves the
scan state of some of a job's logs, `trainwreck merge STATE...` reports on several states as
one serial scan of all their logs would, and `trainwreck diagnose --dask [ADDRESS]` scans on a
Dask cluster (scaleout.cluster). Each is a scanner that diagnose runs in place of its own scan
(diagnose.diagnose's `scanner`), so rules, inputs, evaluation and the report stay one code path.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from trainwreck import formats
from trainwreck.diagnose import EXIT_FINDINGS, EXIT_NOTHING_FOUND, add_report_options, diagnose
from trainwreck.engine import partial
from trainwreck.engine.scanning import Engine
from trainwreck.engine.state import ScanResult
from trainwreck.errors import UsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.sanitize import report_text

Inputs = list[tuple[str, Any]]


class PartialScanner:
    """Scans as diagnose would (serial, or parallel with --jobs) and saves the state to `out`."""

    def __init__(self, out: str, jobs: int | None = None):
        self.out = out
        self.jobs = jobs
        self.result: ScanResult | None = None

    def scan(self, engine: Engine, rules: list[dict[str, Any]], inputs: Inputs) -> Any:
        if any(not isinstance(source, (str, Path)) or str(source) == "-" for _, source in inputs):
            raise UsageError("--partial reads files only (not stdin or streams)")
        result = engine.scan(inputs, jobs=self.jobs)
        data = partial.dump(result, partial.rules_digest(rules))
        try:
            Path(self.out).write_bytes(data)
        except OSError as exc:
            raise UsageError(f"{self.out}: cannot write ({exc.strerror or exc})") from None
        self.result = result
        return result, inputs


class MergeScanner:
    """Reads saved states (the inputs) and merges them in the order given; evidence text is
    read from the logs they name, where this machine can open them."""

    def scan(self, engine: Engine, rules: list[dict[str, Any]], inputs: Inputs) -> Any:
        digest = partial.rules_digest(rules)
        states = [partial.read(str(source)) for _, source in inputs]
        merged = partial.merge_saved(states, engine, digest)
        return merged.result, [(name, name) for name in merged.result.files]


def add_diagnose_options(parser: argparse.ArgumentParser) -> None:
    """diagnose's scale-out options."""
    parser.add_argument(
        "--partial",
        metavar="OUT.state",
        help="save the scan state of these logs to OUT.state instead of reporting "
        "(trainwreck merge reports on several)",
    )
    parser.add_argument(
        "--dask",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="scan as Dask tasks: on the scheduler at ADDRESS (tcp://host:8786), or without "
        "one on a local cluster sized to this machine (the dask extra)",
    )
    parser.add_argument(
        "--dask-workers",
        type=int,
        default=None,
        metavar="N",
        help="workers of the local Dask cluster (default: one per usable CPU)",
    )
    parser.add_argument(
        "--tail-first",
        type=float,
        default=None,
        metavar="MB",
        help="first print a quick verdict from the last MB of every log, then the full report",
    )


def print_quick_verdict(args: argparse.Namespace) -> None:
    """--tail-first: the tails' verdict, on stdout before a text report (stderr otherwise)."""
    if args.tail_first is None:
        return
    if args.tail_first <= 0:
        raise UsageError(f"--tail-first {args.tail_first:g}: the megabytes must be more than 0")
    from trainwreck.scaleout.tail import quick_verdict

    lines = quick_verdict(
        args.paths,
        args.tail_first,
        root=args.root,
        rules=args.rules,
        use_installed=not args.no_installed,
        only=set(args.rule) if args.rule else None,
    )
    out = sys.stdout if args.format == "text" and not args.partial else sys.stderr
    out.write("\n".join(lines) + "\n")
    out.flush()


def scanner_of(args: argparse.Namespace) -> Any:
    """The scanner diagnose's options ask for, or None for diagnose's own scan."""
    if args.partial and args.dask is not None:
        raise UsageError("--partial and --dask: choose one")
    if args.partial:
        return PartialScanner(args.partial, args.jobs)
    if args.dask is not None:
        try:
            from trainwreck.scaleout.cluster import DaskScanner
        except ImportError as exc:
            if exc.name not in ("dask", "distributed") and "dask" not in str(exc):
                raise
            raise UsageError(
                "--dask needs Dask: pip install 'trainwreck[dask]' (dask[distributed])"
            ) from None
        return DaskScanner(args.dask or None, workers=args.dask_workers)
    return None


def report_partial(scanner: PartialScanner, report: Any) -> int:
    """What --partial tells instead of a report: what it saved, skipped and left out."""
    result = scanner.result
    assert result is not None
    for warning in report.warnings:
        print(f"trainwreck: warning: {report_text(warning)}", file=sys.stderr)
    if report.stats.files > len(result.files):  # Flight Recorder or stack dumps
        print(
            f"trainwreck: warning: {report.stats.files - len(result.files):,} hang dump(s) "
            "are not part of a scan state: diagnose them directly",
            file=sys.stderr,
        )
    print(
        f"trainwreck: saved the scan state of {len(result.files):,} file(s), "
        f"{result.lines:,} lines to {report_text(scanner.out)}",
        file=sys.stderr,
    )
    for skipped in result.skipped:
        print(
            f"trainwreck: skipped {report_text(skipped.file)}: {report_text(skipped.reason)}",
            file=sys.stderr,
        )
    return EXIT_NOTHING_FOUND


# --- trainwreck merge ---------------------------------------------------------------------------


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "States merge in the order given, which should be the order of their logs; they must "
        "have been written with the same rules (and --rule) as this merge uses."
    )
    parser.add_argument(
        "states", nargs="+", metavar="STATE", help="scan states written by diagnose --partial"
    )
    add_report_options(
        parser,
        rules_help="a rule bundle (JSON) or rules folder, as given to diagnose (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    missing = [name for name in args.states if not os.path.exists(name)]
    if missing:
        raise UsageError("no such state file: " + ", ".join(map(report_text, missing)))
    report = diagnose(
        args.states,
        args.root,
        rules=args.rules,
        use_installed=not args.no_installed,
        only=set(args.rule) if args.rule else None,
        kb=KnowledgeBase.load(args.root),
        scanner=MergeScanner(),
    )
    for warning in report.warnings:
        print(f"trainwreck: warning: {report_text(warning)}", file=sys.stderr)
    report.findings = [f for f in report.findings if f.confidence >= args.min_confidence]
    sys.stdout.write(formats.render(report, args.format, verbose=args.verbose))
    sys.stdout.flush()
    return EXIT_FINDINGS if report.findings else EXIT_NOTHING_FOUND
