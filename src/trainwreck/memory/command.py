"""`trainwreck memory replay SNAPSHOT`: the allocator what-if on a recorded memory snapshot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainwreck.errors import UsageError
from trainwreck.memory import snapshot as snapshots
from trainwreck.memory.replay import Oom, Run
from trainwreck.memory.whatif import WhatIf, human, parse_size, what_if
from trainwreck.sanitize import report_text

FORMATS = ("text", "json")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="memory_command", metavar="ACTION")
    replay = sub.add_parser(
        "replay",
        help="replay a torch.cuda.memory._dump_snapshot trace under other allocator settings",
        description="Replay the allocator trace of a memory snapshot through a model of the "
        "CUDA caching allocator's rules, under the recorded settings (with a fidelity check) "
        "and under others, and say which would have avoided the OOM.",
    )
    replay.add_argument("snapshot", help="a pickle written by torch.cuda.memory._dump_snapshot")
    replay.add_argument(
        "--capacity",
        help="device memory the allocator may use, e.g. 80GiB (default: reserved plus free "
        "memory at the recorded OOM; unlimited without one)",
    )
    replay.add_argument(
        "--try",
        dest="tries",
        action="append",
        metavar="OPTS",
        help="allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "
        "expandable_segments:True (repeatable; default: a sweep of the useful settings)",
    )
    replay.add_argument(
        "--memory-fraction",
        type=float,
        help="torch.cuda.set_per_process_memory_fraction, which garbage_collection_threshold "
        "needs (the sweep assumes 1.0 for its garbage-collection entries)",
    )
    replay.add_argument("--device", type=int, help="the device to replay, when several traced")
    replay.add_argument("--format", choices=FORMATS, default="text")
    replay.add_argument(
        "--plot", metavar="PNG", help="also plot reserved and allocated over the trace (matplotlib)"
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "memory_command", None) != "replay":
        raise UsageError("usage: trainwreck memory replay SNAPSHOT [options]")
    capacity = parse_size(args.capacity) if args.capacity else None
    snap = snapshots.read(Path(args.snapshot), args.device)
    result = what_if(
        snap, args.tries, capacity, args.memory_fraction, samples=400 if args.plot else 0
    )
    if args.plot:
        plot(result, Path(args.plot))
    print(format_json(result) if args.format == "json" else format_text(result))
    return 0


def _oom_dict(oom: Oom | None) -> dict[str, Any] | None:
    if oom is None:
        return None
    return {
        "event_index": oom.event_index,
        "time_us": oom.time_us,
        "size_bytes": oom.size,
        "stream": oom.stream,
        "reserved_bytes": oom.reserved,
        "allocated_bytes": oom.allocated,
        "largest_free_block_bytes": oom.largest_free,
        "frames": [{"filename": f.filename, "line": f.line, "name": f.name} for f in oom.frames],
    }


def _run_dict(run: Run) -> dict[str, Any]:
    return {
        "settings": run.settings.label,
        "memory_fraction": run.settings.memory_fraction,
        "oom": run.ooms > 0,
        "ooms": run.ooms,
        "first_oom": _oom_dict(run.first_oom),
        "recorded_ooms_served": run.recorded_ooms_served,
        "peak_reserved_bytes": run.peak_reserved,
        "peak_allocated_bytes": run.peak_allocated,
        "fragmentation_at_peak_bytes": run.fragmentation_at_peak,
        "largest_free_block_at_peak_bytes": run.largest_free_at_peak,
        "cuda_malloc_count": run.cuda_mallocs,
        "cuda_free_count": run.cuda_frees,
        "alloc_retries": run.retries,
    }


def format_json(result: WhatIf) -> str:
    fidelity = result.recorded.fidelity
    assert fidelity is not None
    divergence = fidelity.first_divergence
    doc = {
        "snapshot": result.snapshot.path,
        "device": result.snapshot.device,
        "events": len(result.snapshot.events),
        "capacity_bytes": result.capacity,
        "capacity_source": result.capacity_source,
        "settings_recorded": result.settings_recorded,
        "recorded": _run_dict(result.recorded),
        "fidelity": {
            "checkable": fidelity.checkable,
            "exact": fidelity.exact,
            "recorded_segment_events": fidelity.recorded_segment_events,
            "matched_segment_events": fidelity.matched_segment_events,
            "recorded_ooms": fidelity.recorded_ooms,
            "reproduced_ooms": fidelity.reproduced_ooms,
            "first_divergence": None
            if divergence is None
            else {
                "event_index": divergence.event_index,
                "recorded": [list(e) for e in divergence.recorded],
                "model": [list(e) for e in divergence.model],
            },
        },
        "runs": [_run_dict(r) for r in result.ranked()],
        "answer": result.answer,
    }
    return json.dumps(doc, indent=2)


def _events(pairs: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{action} {human(size)}" for action, size in pairs) or "nothing"


def format_text(result: WhatIf) -> str:
    snap = result.snapshot
    rec = result.recorded
    fidelity = rec.fidelity
    assert fidelity is not None
    lines = [
        f"snapshot: {report_text(snap.path)} (device {snap.device}, {len(snap.events)} trace events)",
        f"capacity: {human(result.capacity)} ({result.capacity_source})",
        f"recorded settings: {report_text(rec.settings.label)}"
        + ("" if result.settings_recorded else " (assumed: the snapshot records none)"),
    ]
    if fidelity.checkable:
        lines.append(
            f"fidelity: the model reproduces {fidelity.matched_segment_events} of "
            f"{fidelity.recorded_segment_events} recorded segment events and "
            f"{fidelity.reproduced_ooms} of {fidelity.recorded_ooms} recorded OOMs"
            + (" (exact)" if fidelity.exact else "")
        )
    else:
        lines.append(
            "fidelity: not checked, the trace records no segment events "
            "(recorded with skip_actions, or not written by the allocator)"
        )
    if fidelity.first_divergence is not None:
        d = fidelity.first_divergence
        lines.append(
            f"  first divergence at trace event {d.event_index}: recorded {_events(d.recorded)}; "
            f"model {_events(d.model)}"
        )
    header = (
        f"{'settings':<56} {'OOM':>5} {'peak reserved':>14} {'peak allocated':>15} "
        f"{'frag at peak':>13} {'largest free':>13} {'cudaMalloc':>10} {'cudaFree':>9}"
    )
    lines += ["", header]
    for label, r in [("recorded: " + rec.settings.label, rec)] + [
        (r.settings.label, r) for r in result.ranked()
    ]:
        oom = f"#{r.first_oom.event_index}" if r.first_oom else "no"
        lines.append(
            f"{report_text(label)[:56]:<56} {oom:>5} {human(r.peak_reserved):>14} "
            f"{human(r.peak_allocated):>15} {human(r.fragmentation_at_peak):>13} "
            f"{human(r.largest_free_at_peak):>13} {r.cuda_mallocs:>10} {r.cuda_frees:>9}"
        )
    if rec.first_oom is not None:
        oom = rec.first_oom
        lines += [
            "",
            f"OOM under the recorded settings at trace event {oom.event_index}: "
            f"{human(oom.size)} on stream {oom.stream} with {human(oom.allocated)} allocated, "
            f"{human(oom.reserved)} reserved, largest free block {human(oom.largest_free)}",
        ]
        for frame in oom.frames[:12]:
            lines.append(
                f"  {report_text(frame.filename)}:{frame.line} in {report_text(frame.name)}"
            )
    lines += ["", f"answer: {result.answer}"]
    return "\n".join(lines)


def plot(result: WhatIf, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in [result.recorded, *result.ranked()]:
        xs = [p[0] for p in r.timeline]
        line = ax.plot(
            xs, [p[1] / (1 << 30) for p in r.timeline], label=f"{r.settings.label} reserved"
        )
        ax.plot(
            xs, [p[2] / (1 << 30) for p in r.timeline], linestyle=":", color=line[0].get_color()
        )
    if result.capacity:
        ax.axhline(result.capacity / (1 << 30), color="black", linewidth=0.8, label="capacity")
    ax.set_xlabel("trace event")
    ax.set_ylabel("GiB (solid: reserved, dotted: allocated)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
