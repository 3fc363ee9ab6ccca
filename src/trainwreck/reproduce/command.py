"""`trainwreck reproduce` on the command line."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainwreck.reproduce.execution import DEFAULT_CELL_TIMEOUT, DEFAULT_TIMEOUT, first_lines
from trainwreck.reproduce.records import RunRecord, Status, status_word
from trainwreck.reproduce.runner import reproduce
from trainwreck.reproduce.source import SCALES
from trainwreck.reproduce.targets import ReproduceError, discover


def jobs_value(text: str) -> int:
    """-j N, or -j auto: as many notebooks at once as CPUs this process may use."""
    from trainwreck.engine.parallel import usable_cpus

    if text == "auto":
        return usable_cpus()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, not {text!r}") from None


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="entry ids (default: all)")
    parser.add_argument("--force", action="store_true", help="re-run even when cached")
    parser.add_argument(
        "-j",
        "--jobs",
        type=jobs_value,
        default=1,
        metavar="N",
        help="notebooks run in parallel; auto: one per CPU this process may use (default 1)",
    )
    parser.add_argument(
        "--scale", choices=SCALES, default="ci", help="ci: ~45 s on 2 cores; full: larger"
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="on a CUDA host: save passed GPU notebooks with their evidence to recordings/ "
        "(commit them; hosts without a GPU then show these runs)",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=DEFAULT_CELL_TIMEOUT,
        metavar="S",
        help=f"seconds one cell may run (default {DEFAULT_CELL_TIMEOUT:g})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds one notebook may run (default {DEFAULT_TIMEOUT:g})",
    )


def format_failure(record: RunRecord | Mapping[str, Any]) -> str:
    """A failed run for a terminal or a CI log: where it stopped, the cell's first lines, the
    message and what the cell printed last."""
    if not isinstance(record, RunRecord):
        record = RunRecord.from_json(record)
    error = record.error
    where = f"{record.notebook or record.id}"
    cell = error.cell if error is not None else -1
    lines = [f"FAILED {record.id} ({where})"]
    if isinstance(cell, int) and cell >= 0:
        lines[0] += f", cell {cell}:"
        source = first_lines(error.source if error is not None else "")
        lines.extend("    | " + line for line in source.splitlines())
    message = error.message if error is not None and error.message is not None else None
    lines.append(f"  {message if message is not None else 'unknown error'}")
    if error is not None and error.output:
        lines.append("  the cell printed (last lines):")
        lines.extend("    > " + line for line in str(error.output).splitlines())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    if args.jobs < 1:
        print("trainwreck: -j must be at least 1", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        manifest = reproduce(
            args.root,
            args.ids or None,
            force=args.force,
            jobs=args.jobs,
            scale=args.scale,
            cell_timeout=args.cell_timeout,
            timeout=args.timeout,
            progress=progress,
            record=getattr(args, "record", False),
        )
    except ReproduceError as exc:
        print(exc.report("reproduce"), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # build/ not writable, disk full: one line, not a traceback
        print(f"trainwreck: {exc.filename or 'build/'}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(
            f"trainwreck: reproduce needs the repro extra ({exc.name} is missing): "
            "pip install 'trainwreck[repro]'",
            file=sys.stderr,
        )
        return 2
    # The runs the ids named: an entry's id names each of its reproductions.
    wanted = {t.id for t in discover(Path(args.root), args.ids)} if args.ids else None
    records = [
        RunRecord.from_json(r) for r in manifest["notebooks"] if wanted is None or r["id"] in wanted
    ]
    failed = [r for r in records if r.status is Status.FAILED]
    for record in records:
        status = f"{status_word(record.status)}" + (" (cached)" if record.cached else "")
        line = f"{status:<22} {record.id}"
        if record.status in (Status.PASSED, Status.FAILED):
            line += f"  {record.duration_s:.1f} s"
        if record.status is Status.STALE and record.error is not None:
            line += f"  ({record.error.message})"
        print(line)
    for record in failed:
        print(format_failure(record), file=sys.stderr)
    print(
        f"{len(records)} notebooks, {len(failed)} failed, "
        f"{time.monotonic() - started:.1f} s; manifest: build/manifest.json",
        file=sys.stderr,
    )
    return 1 if failed else 0
