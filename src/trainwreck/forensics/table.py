"""The alignment table `trainwreck explain flight-recorder DUMP...` prints: per process group,
where the ranks stand (grouped, so 4096 ranks stay a few lines), the culprits, the first
mismatch, p2p ops without a partner, rolled-over buffers and the late rank; then the stacks."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from trainwreck.forensics.analysis import ranges
from trainwreck.forensics.report import Forensics, conclude
from trainwreck.sanitize import report_text

MAX_ROWS = 12


def _t(value: Any) -> str:
    return report_text(value)


def format_text(found: Forensics) -> str:
    lines = [
        f"Flight Recorder: {found.traces} rank dump(s), {len(found.stack_dumps)} stack dump(s)"
    ]
    if found.missing:
        lines.append(f"ranks without a dump: {ranges(found.missing)}")
    for group in found.groups:
        first, last = group.window
        held = f"#{first}-#{last}" if last >= first else "nothing in common"
        lines += [
            "",
            f"process group {_t(group.name)} ({_t(group.desc or 'no desc')}): "
            f"{len(group.ranks)} ranks; every rank holds {held}",
            f"  {'ranks':<20} {'count':>6} {'enqueued':>9} {'completed':>10}  last op",
        ]
        for row in group.rows[:MAX_ROWS]:
            lines.append(
                f"  {_t(row.ranks):<20} {row.count:>6} {'#' + str(row.enqueued):>9} "
                f"{'#' + str(row.completed):>10}  {_t(row.last)}"
            )
        if len(group.rows) > MAX_ROWS:
            lines.append(f"  ... {len(group.rows) - MAX_ROWS} more rows")
        for culprit in group.culprits:
            lines.append(f"  culprit: rank {culprit.rank} {_t(culprit.why)}")
            lines.append(
                f"    last: {_t(culprit.last)} (record {culprit.record_id}, {_t(culprit.file)})"
            )
            for frame in culprit.frames[:3]:
                lines.append(f"    at {_t(frame)}")
        if group.culprit_count > len(group.culprits):
            lines.append(f"  ... {group.culprit_count - len(group.culprits)} more culprits")
        if (m := group.mismatch) is not None:
            lines.append(
                f"  mismatch at #{m.seq} in {m.what} ({group.mismatches} collectives in all):"
            )
            for value, ranks in m.values:
                lines.append(f"    ranks {_t(ranks)}: {_t(value)}")
        for line in group.unmatched_p2p:
            lines.append(f"  p2p without a partner: {_t(line)}")
        if group.rolled_over:
            rolled = ", ".join(f"{r} from #{s}" for r, s in group.rolled_over[:8])
            lines.append(f"  rolled-over buffers ({len(group.rolled_over)} ranks): {_t(rolled)}")
        if (late := group.late) is not None:
            lines.append(
                f"  late: rank {late.rank} issued {late.times} of {late.of} collectives last "
                f"(median {late.lag_ms} ms behind)"
            )
    if found.stacks is not None:
        lines += ["", "stacks (main thread, outermost first):"]
        for ranks, frames in found.stacks.groups[:MAX_ROWS]:
            lines.append(f"  ranks {ranges(ranks)}: {_t(' > '.join(frames[-4:]))}")
        lines.append(f"  the minority differs at {_t(found.stacks.differs_at)}")
    for note in found.notes:
        lines.append(f"note: {_t(note)}")
    for item in found.skipped:
        lines.append(f"skipped: {_t(item.file)}: {_t(item.reason)}")
    conclusion = conclude(found)
    lines += [
        "",
        f"conclusion: {_t(conclusion.look_at)} [{conclusion.entry}]"
        if conclusion
        else "conclusion: the dumps show no hang",
    ]
    return "\n".join(lines) + "\n"


def to_json(found: Forensics) -> dict[str, Any]:
    conclusion = conclude(found)
    return {
        "dumps": found.traces,
        "missing": list(found.missing),
        "groups": [asdict(group) for group in found.groups],
        "stacks": asdict(found.stacks) if found.stacks else None,
        "notes": list(found.notes),
        "skipped": [item.to_json() for item in found.skipped],
        "conclusion": None
        if conclusion is None
        else {
            "entry": conclusion.entry,
            "ranks": list(conclusion.ranks),
            "look_at": conclusion.look_at,
        },
    }
