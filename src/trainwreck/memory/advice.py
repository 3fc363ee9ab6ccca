"""What `trainwreck diagnose` adds to an OOM finding that a snapshot replay can answer: how to
record the snapshot (the probe's OOM observer) and the `trainwreck memory replay` command."""

from __future__ import annotations

_RECORD = (
    "record the next OOM: after `import torch`, call "
    "`trainwreck.probe.oom_snapshot.record_oom_snapshots(DIR)` (it switches on the allocator's "
    "history and its OOM observer writes DIR/oom-snapshot-rank{R}-0.pickle), then run "
    "`trainwreck memory replay SNAPSHOT`"
)
# entry id -> the question the replay answers for it
REPLAY_NOTES = {
    "cuda-allocator-fragmentation": _RECORD
    + ": it replays the trace under expandable_segments:True, max_split_size_mb and "
    "garbage_collection_threshold and says which one avoids the OOM, with the headroom left",
    "cuda-oom-capacity": _RECORD
    + ": it says whether any allocator setting avoids the OOM (for a capacity OOM none does) "
    "and the peak memory each setting needs",
}


def replay_notes(entry_id: str) -> tuple[str, ...]:
    """The note for a finding of `entry_id`, or none."""
    note = REPLAY_NOTES.get(entry_id)
    return (note,) if note else ()
