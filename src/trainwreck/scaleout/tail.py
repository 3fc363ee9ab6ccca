"""`trainwreck diagnose --tail-first MB`: a quick verdict from the last MB of every log, before
the full scan. A failing job's logs end with what went wrong (the first error, then the peers'
timeouts), so the tails of ten thousand logs name the failure in a fraction of the time the
whole logs take; the full report follows and is the answer of record."""

from __future__ import annotations

import io
from typing import Any

from trainwreck.diagnose import diagnose
from trainwreck.engine.reading import is_path
from trainwreck.formats import GROUP_RANKS, job_summary, rank_ranges
from trainwreck.inputs import expand_inputs
from trainwreck.sanitize import report_text


def tails(paths: list[str], megabytes: float) -> tuple[list[tuple[str, Any]], int]:
    """The last `megabytes` of every plain log the paths name, from a line start, as streams
    under the log's own name (its rank comes from it); and how many logs were left to the full
    scan (compressed, or not regular files)."""
    limit = max(1, int(megabytes * 1e6))
    found: list[tuple[str, Any]] = []
    left = 0
    for display, source in expand_inputs([p for p in paths if "://" not in p])[0]:
        if not is_path(source):
            left += 1
            continue
        try:
            with open(source, "rb") as handle:
                if handle.read(2) == b"\x1f\x8b":
                    left += 1  # gzip: no seeking to its end
                    continue
                size = handle.seek(0, io.SEEK_END)
                handle.seek(max(0, size - limit))
                data = handle.read(limit)
        except OSError:
            left += 1
            continue
        if size > limit:
            data = data[data.find(b"\n") + 1 :]  # from the first whole line
        found.append((display, io.BytesIO(data)))
    return found, left


def quick_verdict(paths: list[str], megabytes: float, **options: Any) -> list[str]:
    """Lines of the quick verdict (`options`: diagnose's rule options)."""
    streams, left = tails(paths, megabytes)
    head = f"Quick verdict from the last {megabytes:g} MB of {len(streams):,} log(s)"
    head += f" ({left:,} left to the full scan)" if left else ""
    if not streams:
        return [head + ": nothing to read.", ""]
    report = diagnose([], streams=streams, jobs=1, **options)
    lines = [head + "; the full scan follows:"]
    lines += [f"  {line}" for line in job_summary(report)]
    for finding in report.findings:
        ranks = finding.ranks
        shown = rank_ranges(ranks) if len(ranks) > GROUP_RANKS else ", ".join(map(str, ranks))
        initiating = finding.initiating_rank
        lines.append(
            f"  {finding.rank}. {report_text(finding.title)}  [{report_text(finding.entry)}]"
            + (f"  ranks {report_text(shown)}" if shown else "")
            + (
                f"; initiating rank {report_text(str(initiating))}"
                if initiating is not None
                else ""
            )
        )
    if not report.findings:
        lines.append("  no known failure in the tails.")
    return [*lines, ""]
