"""`trainwreck memory replay` on hand-made traces whose outcomes follow from the allocator's
rules (worked out in each test), on a generated realistic trace, and on hostile snapshots."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from trainwreck.cli import main
from trainwreck.memory import traces
from trainwreck.memory.settings import parse_alloc_conf
from trainwreck.memory.snapshot import parse
from trainwreck.memory.whatif import what_if

MIB = 1 << 20


def write(tmp_path: Path, data: object, name: str = "snap.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data))
    return path


def run_json(capsys, *args: str) -> dict:
    assert main(["memory", "replay", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def by_settings(doc: dict) -> dict[str, dict]:
    return {r["settings"]: r for r in doc["runs"]}


def test_fragmentation_oom_is_avoided_by_expandable_segments(tmp_path, capsys):
    # Four 20 MiB segments, each split by a 12 MiB tensor: 48 MiB live, 80 MiB reserved, the
    # free memory is four 8 MiB slivers no segment can give back. 30 MiB needs a new segment:
    # 80 + 30 > 100, nothing unsplit to release, OOM. Expandable segments map the same 80 MiB
    # as one range, the 12 MiB tensors pack into its first 48 MiB, and the 30 MiB request fits
    # in the 32 MiB after them: no OOM, peak 80 MiB, 20 MiB to spare.
    path = write(tmp_path, traces.fragmentation_case())
    doc = run_json(capsys, str(path))
    assert doc["capacity_bytes"] == 100 * MIB
    rec = doc["recorded"]
    assert rec["oom"] and rec["first_oom"]["allocated_bytes"] == 48 * MIB
    assert rec["first_oom"]["reserved_bytes"] == 80 * MIB
    assert rec["first_oom"]["largest_free_block_bytes"] == 8 * MIB
    assert rec["first_oom"]["frames"] == [{"filename": "train.py", "line": 42, "name": "forward"}]
    assert doc["fidelity"]["exact"]
    runs = by_settings(doc)
    assert not runs["expandable_segments:True"]["oom"]
    assert runs["expandable_segments:True"]["peak_reserved_bytes"] == 80 * MIB
    # max_split_size changes nothing here: the 20 MiB blocks are below it and the 8 MiB
    # slivers are not oversize, so release_available_cached_blocks frees nothing.
    assert runs["max_split_size_mb:128"]["oom"]
    assert doc["answer"].startswith("expandable_segments:True avoids the OOM with 20.00 MiB")


def test_max_split_size_keeps_the_big_block_for_the_big_request(tmp_path, capsys):
    # A freed 60 MiB segment is split by a 12 MiB tensor (default settings), leaving 48 MiB:
    # 50 MiB then needs 60 + 50 > 100 and the split segment cannot be released: OOM with only
    # 12 MiB live. With max_split_size_mb:40 the 12 MiB request may not take the oversize
    # 60 MiB block (12 MiB of its own: 72 MiB reserved), and 50 MiB takes the whole 60 MiB
    # block (60 < 50 + 20): peak 72 MiB, 28 MiB to spare, less than expandable segments' 80.
    path = write(tmp_path, traces.max_split_case())
    doc = run_json(
        capsys, str(path), "--try", "max_split_size_mb:40", "--try", "expandable_segments:True"
    )
    assert doc["recorded"]["oom"]
    runs = by_settings(doc)
    assert runs["max_split_size_mb:40"]["peak_reserved_bytes"] == 72 * MIB
    assert runs["expandable_segments:True"]["peak_reserved_bytes"] == 80 * MIB
    assert doc["runs"][0]["settings"] == "max_split_size_mb:40"
    assert doc["answer"].startswith("max_split_size_mb:40 avoids the OOM with 28.00 MiB")


def test_capacity_oom_is_avoided_by_nothing(tmp_path, capsys):
    # 60 MiB live plus 50 MiB requested is 110 MiB of tensors in 100 MiB: no setting helps.
    path = write(tmp_path, traces.capacity_case())
    doc = run_json(capsys, str(path))
    assert all(r["oom"] for r in doc["runs"])
    assert "capacity OOM, not fragmentation" in doc["answer"]


def test_text_report_names_the_failing_frame_and_the_answer(tmp_path, capsys):
    path = write(tmp_path, traces.fragmentation_case())
    assert main(["memory", "replay", str(path), "--try", "expandable_segments:True"]) == 0
    out = capsys.readouterr().out
    assert "reproduces 4 of 4 recorded segment events and 1 of 1 recorded OOMs (exact)" in out
    assert "train.py:42 in forward" in out
    assert out.rstrip().splitlines()[-1].startswith("answer: expandable_segments:True avoids")


def test_a_lower_capacity_turns_the_realistic_trace_into_an_oom(tmp_path, capsys):
    data = traces.realistic_case(6000, seed=3)
    snap = parse(data, "real")
    unlimited = what_if(snap, ["expandable_segments:True"])
    # Self-consistency: the trace was recorded through the model, so the replay under the
    # recorded settings must match every recorded segment event.
    fidelity = unlimited.recorded.fidelity
    assert fidelity is not None and fidelity.exact
    assert fidelity.matched_segment_events == fidelity.recorded_segment_events > 0
    tight = what_if(snap, ["expandable_segments:True"], capacity=unlimited.recorded.peak_allocated)
    assert tight.recorded.ooms > 0  # the reserved peak exceeds what is ever allocated at once


def test_replaying_a_trace_recorded_under_expandable_segments_is_exact():
    data = traces.realistic_case(4000, seed=1, settings="expandable_segments:True")
    result = what_if(parse(data, "x"), ["max_split_size_mb:128"])
    assert result.recorded.settings == parse_alloc_conf("expandable_segments:True")
    assert result.recorded.fidelity is not None and result.recorded.fidelity.exact


def test_a_divergence_is_reported_with_its_event(tmp_path, capsys):
    data = traces.fragmentation_case()
    # Pretend the real allocator made a 22 MiB segment where the rules say 20 MiB.
    first = next(e for e in data["device_traces"][0] if e["action"] == "segment_alloc")
    first["size"] = 22 * MIB
    doc = run_json(capsys, str(write(tmp_path, data)))
    div = doc["fidelity"]["first_divergence"]
    assert not doc["fidelity"]["exact"]
    assert div["event_index"] == 1
    assert div["recorded"] == [["segment_alloc", 22 * MIB]]
    assert div["model"] == [["segment_alloc", 20 * MIB]]


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps(Evil()), "refused global builtins.print"),
        (pickle.dumps({"device_traces": [[]]})[:-3], "not a readable snapshot pickle"),
        (pickle.dumps([1, 2]), "expected a snapshot dict"),
        (pickle.dumps({"segments": []}), "no device_traces"),
        (pickle.dumps({"segments": [], "device_traces": [[]]}), "enabled='state' records no trace"),
        (
            pickle.dumps({"device_traces": [[{"action": "teleport", "size": 1}]]}),
            "unknown action 'teleport'",
        ),
        (
            pickle.dumps(
                {"device_traces": [[{"action": "free_requested", "addr": 4096, "size": 512}]]}
            ),
            "no earlier alloc in the trace returned",
        ),
        (
            pickle.dumps({"device_traces": [[{"action": "alloc", "addr": 1, "size": 1}]] * 2}),
            "choose one with --device",
        ),
    ],
    ids=[
        "global",
        "truncated",
        "list",
        "no-traces",
        "state-only",
        "action",
        "unknown-free",
        "two-devices",
    ],
)
def test_hostile_snapshots_give_one_line_naming_the_file(tmp_path, capsys, payload, message):
    path = tmp_path / "bad.pickle"
    path.write_bytes(payload)
    assert main(["memory", "replay", str(path)]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "pwned" not in captured.out
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(path) in err and message in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capacity", "lots"], "expected a size"),
        (["--try", "max_split_size_mb:5"], "must be >= 20"),
        (["--memory-fraction", "1.5"], "must be in (0, 1]"),
        (["--device", "3"], "device 3 has no trace events"),
    ],
)
def test_bad_arguments_are_usage_errors(tmp_path, capsys, args, message):
    path = write(tmp_path, traces.capacity_case())
    assert main(["memory", "replay", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["memory", "replay", str(tmp_path / "nope.pickle")]) == 2
    assert "no such snapshot file" in capsys.readouterr().err


def test_record_stream_frees_synchronised_by_the_fallback_replay_exactly():
    # A 30 MiB tensor used on another stream is freed: its free waits for that stream
    # (free_requested only). 40 MiB then finds no free block; 30 + 40 > 50 fails;
    # release_cached_blocks synchronises the pending free (free_completed), frees its
    # segment, and the retry succeeds. The replay must leave that completion to the model's
    # own fallback, or it would free the segment early and see no segment_free to match.
    rec = traces.TraceRecorder(parse_alloc_conf(""), 50 * MIB)
    used_elsewhere = rec.alloc(30 * MIB)
    assert used_elsewhere is not None
    rec.free(used_elsewhere, deferred=True)
    assert rec.alloc(40 * MIB) is not None
    actions = [e["action"] for e in rec.events]
    assert actions == [
        "segment_alloc",
        "alloc",
        "free_requested",
        "free_completed",
        "segment_free",
        "segment_alloc",
        "alloc",
    ]
    result = what_if(parse(rec.snapshot(), "x"), ["expandable_segments:True"], 50 * MIB)
    fidelity = result.recorded.fidelity
    assert fidelity is not None and fidelity.exact and fidelity.matched_segment_events == 3
    assert result.recorded.retries == 1


def test_blocks_are_reused_only_on_their_own_stream():
    rec = traces.TraceRecorder(parse_alloc_conf(""))
    side = rec.alloc(12 * MIB, stream=7)
    assert side is not None
    rec.free(side)
    rec.alloc(12 * MIB, stream=0)  # the cached 12 MiB segment belongs to stream 7
    segments = [(e["size"], e["stream"]) for e in rec.events if e["action"] == "segment_alloc"]
    assert segments == [(12 * MIB, 7), (12 * MIB, 0)]
    result = what_if(parse(rec.snapshot(), "x"), ["max_split_size_mb:128"])
    assert result.recorded.fidelity is not None and result.recorded.fidelity.exact


def test_a_trace_without_segment_events_is_not_called_faithful(tmp_path, capsys):
    # skip_actions=["segment_alloc", ...] leaves nothing to check the model against.
    data = traces.fragmentation_case()
    data["device_traces"][0] = [
        e for e in data["device_traces"][0] if not e["action"].startswith("segment")
    ]
    del data["allocator_settings"]
    doc = run_json(capsys, str(write(tmp_path, data)))
    assert doc["fidelity"]["checkable"] is False and doc["fidelity"]["exact"] is False
    assert doc["settings_recorded"] is False
    assert (
        main(["memory", "replay", str(write(tmp_path, data)), "--try", "expandable_segments:True"])
        == 0
    )
    out = capsys.readouterr().out
    assert "fidelity: not checked" in out and "(assumed: the snapshot records none)" in out


def test_empty_cache_is_told_from_an_allocation_fallback():
    from trainwreck.memory.replay import empty_cache_points
    from trainwreck.memory.snapshot import TraceEvent

    def ev(action: str) -> TraceEvent:
        return TraceEvent(action, 1, 512, 0, None, None, None)

    # 0-1: frees that no allocation follows (the program's empty_cache); 3-5: frees and a
    # synchronised completion right before a segment_alloc (a fallback); 8: frees before an OOM.
    trace = [
        ev(a)
        for a in (
            "segment_free",
            "segment_free",
            "free_requested",
            "segment_free",
            "free_completed",
            "segment_free",
            "segment_alloc",
            "alloc",
            "segment_free",
            "oom",
        )
    ]
    assert empty_cache_points(trace) == frozenset({0})


def test_empty_cache_before_an_allocation_that_needs_a_segment_replays_exactly():
    # 30 MiB freed and cached, empty_cache() frees its segment, then 12 MiB: the cache could
    # have served 12 MiB from the 30 MiB block, so the frees before its segment_alloc cannot
    # be malloc's fallback (malloc looks in the cache first): they are the empty_cache.
    rec = traces.TraceRecorder(parse_alloc_conf(""))
    first = rec.alloc(30 * MIB)
    assert first is not None
    rec.free(first)
    rec.empty_cache()
    rec.alloc(12 * MIB)
    actions = [e["action"] for e in rec.events]
    assert actions[-3:] == ["segment_free", "segment_alloc", "alloc"]
    result = what_if(parse(rec.snapshot(), "x"), ["expandable_segments:True"])
    assert result.recorded.fidelity is not None and result.recorded.fidelity.exact
