"""Hang forensics on real dumps (tests/forensics/hang-gloo, made by make_hang.py) and on
hostile ones: a pickle is data, a broken dump is one line, never a traceback."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path

import pytest

from trainwreck.forensics import report, stacks
from trainwreck.forensics.dumps import DumpError, load_bytes, read_dump, sniff

HANG = Path(__file__).parent / "forensics" / "hang-gloo"


def files(*folders: str) -> list[tuple[str, str]]:
    return [(str(p), str(p)) for folder in folders for p in sorted((HANG / folder).iterdir())]


# --- reading dumps --------------------------------------------------------------------------------


def test_a_real_pickle_dump_reads_into_typed_records():
    dump = read_dump(str(HANG / "dumps" / "nccl_trace_rank_0"))
    assert dump.kind == "pickle" and dump.rank == 0 and dump.version.startswith("2.")
    assert dump.group_ranks[""] == (0, 1, 2)  # pg_config's ranks are the text "[0, 1, 2]"
    last = dump.records[-1]
    assert last.op == "all_reduce" and last.backend == "gloo" and last.input_sizes == ((16,),)
    assert last.pg_desc == "default_pg" and last.frames  # pickle dumps carry the frames
    assert dump.status[0].enqueued == last.collective_seq_id


def test_a_json_dump_reads_the_same_but_without_frames():
    pickled = read_dump(str(HANG / "dumps" / "nccl_trace_rank_1"))
    dumped = read_dump(str(HANG / "json" / "fr_rank_1.json"))
    assert dumped.kind == "json" and dumped.rank == 1
    assert [r.signature() for r in dumped.records] == [r.signature() for r in pickled.records]
    assert dumped.status == pickled.status  # JSON writes the counters as strings
    assert all(not r.frames for r in dumped.records)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["BOOM_FILE"],))


def test_a_pickle_with_a_global_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("BOOM_FILE", str(marker))
    data = pickle.dumps({"version": "2.10", "entries": [_Boom()]}, protocol=2)
    with pytest.raises(DumpError) as caught:
        load_bytes(data, "evil.pkl")
    assert "refused global" in caught.value.message and "system" in caught.value.message
    assert caught.value.report().startswith("trainwreck: evil.pkl: pickle refused")
    assert not marker.exists()  # os.system never ran
    pickle.loads(data)  # the control: an ordinary unpickler would have run it
    assert marker.exists()


@pytest.mark.parametrize(
    "data, reason",
    [
        (HANG.joinpath("dumps", "nccl_trace_rank_0").read_bytes()[:87], "truncated"),
        (HANG.joinpath("dumps", "nccl_trace_rank_0").read_bytes()[:-40], "truncated"),
        (b"\x80\x02" + b"\xff" * 85, "unreadable pickle"),
        (b'{"version": "2.10", "entries": [', "unreadable json"),
        (pickle.dumps([1, 2, 3], protocol=2), "not a Flight Recorder dump"),
        (b"plain text log line\n", "not a Flight Recorder dump"),
        (b"\x80\x02}r\xff\xff\xff\xff.", "more memory than"),  # a memo index of 2**32 - 1
        # 10**9: the C unpickler would size its memo to it (15 GB, 18 s) without the cap
        (b"\x80\x02}r" + (10**9).to_bytes(4, "little") + b".", "more memory than"),
        (b"\x80\x02}K\x01a.", "AttributeError"),  # APPEND onto a dict
    ],
    ids=[
        "87-bytes",
        "truncated",
        "garbage-pickle",
        "truncated-json",
        "a-list",
        "text",
        "huge-memo-index",
        "memo-index-a-billion",
        "append-to-dict",
    ],
)
def test_broken_dumps_are_one_line_each(data, reason):
    with pytest.raises(DumpError) as caught:
        load_bytes(data, "x")
    assert reason in caught.value.message and "\n" not in caught.value.message


def test_sniff_tells_dumps_from_logs():
    assert sniff(b"\x80\x02}q\x00") == "pickle"
    assert sniff(b'{"entries": [], "version": "2.10"}') == "json"
    assert sniff(b'{"level": "info", "msg": "step 1"}') is None
    assert sniff(b"[rank0]: Traceback") is None


# --- analysis on the real hung job ---------------------------------------------------------------


def test_the_real_hang_names_rank_2_and_the_all_reduce_it_never_issued():
    found = report.analyse(files("dumps", "pyspy"))
    assert found.traces == 3 and not found.skipped and not found.missing
    (group,) = found.groups
    assert group.desc == "default_pg" and group.ranks == (0, 1, 2)
    assert [c.rank for c in group.culprits] == [2]
    assert group.diverging_op.startswith(f"#{group.diverges_at} all_reduce")
    assert group.mismatch is None  # every collective both sides issued agrees
    conclusion = report.conclude(found)
    assert conclusion.entry == report.TIMEOUT and conclusion.ranks == (2,)
    assert "look at rank 2" in conclusion.look_at and "load_batch" in conclusion.look_at
    assert {e.part for e in conclusion.evidence} == {"dump", "stack"}


@pytest.mark.parametrize("folders", [("json",), ("dumps", "faulthandler"), ("json", "pyspy")])
def test_every_form_of_the_real_dumps_gives_the_same_culprit(folders):
    conclusion = report.conclude(report.analyse(files(*folders)))
    assert conclusion.ranks == (2,) and "#7 all_reduce" in conclusion.collective


def test_faulthandler_and_py_spy_stacks_group_the_same_way():
    for folder in ("faulthandler", "pyspy"):
        dumps = [
            stacks.parse_stacks(Path(p).read_text(), p, r) for r, (p, _) in enumerate(files(folder))
        ]
        groups = stacks.group_stacks(dumps)
        assert groups.minority == (2,), folder
        assert "load_batch" in groups.differs_at and "all_reduce" in groups.majority_at


def test_a_missing_rank_and_duplicates_and_a_mix_are_reported(tmp_path):
    for name in ("nccl_trace_rank_0", "nccl_trace_rank_1"):
        shutil.copy(HANG / "dumps" / name, tmp_path / name)
    shutil.copy(HANG / "json" / "fr_rank_1.json", tmp_path / "fr_rank_1.json")  # rank 1 again
    found = report.analyse([(str(p), str(p)) for p in sorted(tmp_path.iterdir())])
    assert found.missing == (2,)
    assert any("duplicate rank 1" in s.reason for s in found.skipped)
    conclusion = report.conclude(found)
    assert conclusion.ranks == (2,) and "no dump" in conclusion.look_at


def test_a_mismatch_names_the_field_the_values_and_the_minority(tmp_path):
    for rank in range(3):
        raw = json.loads((HANG / "json" / f"fr_rank_{rank}.json").read_bytes())
        if rank == 1:
            raw["entries"][2]["input_sizes"] = [[8]]  # rank 1 reduced a different tensor
        raw["entries"] = [e for e in raw["entries"] if e["collective_seq_id"] <= 6]
        raw["pg_status"]["0"]["last_enqueued_collective"] = "6"
        (tmp_path / f"r{rank}.json").write_text(json.dumps(raw))
    found = report.analyse([(str(p), str(p)) for p in sorted(tmp_path.iterdir())])
    mismatch = found.groups[0].mismatch
    assert mismatch.what == "input sizes" and mismatch.minority == (1,)
    assert mismatch.values[0][1] == "0,2" and "[[8]]" in mismatch.values[1][0]
    assert report.conclude(found).entry == report.DESYNC


def test_rolled_over_buffers_align_on_what_every_rank_holds(tmp_path):
    for rank in range(3):
        raw = json.loads((HANG / "json" / f"fr_rank_{rank}.json").read_bytes())
        raw["entries"] = raw["entries"][rank:]  # rank r lost its first r records
        (tmp_path / f"r{rank}.json").write_text(json.dumps(raw))
    group = report.analyse([(str(p), str(p)) for p in sorted(tmp_path.iterdir())]).groups[0]
    assert [r for r, _ in group.rolled_over] == [1, 2] and group.window[0] == 3
    assert [c.rank for c in group.culprits] == [2]


def test_entries_without_frames_or_fields_are_read_as_far_as_they_go(tmp_path):
    raw = json.loads((HANG / "json" / "fr_rank_0.json").read_bytes())
    raw["version"] = "3.0"
    raw["entries"] = [{"collective_seq_id": 1}, "junk", *raw["entries"]]
    (tmp_path / "fr_rank_0.json").write_text(json.dumps(raw))
    found = report.analyse([(str(tmp_path / "fr_rank_0.json"),) * 2])
    assert any("not records" in s.reason for s in found.skipped)
    assert any("not 2.x" in n for n in found.notes)


def test_rank_from_a_regex_when_names_have_no_trailing_number(tmp_path):
    for rank in range(3):
        shutil.copy(HANG / "dumps" / f"nccl_trace_rank_{rank}", tmp_path / f"host{rank}-trace.bin")
    paths = [(str(p), str(p)) for p in sorted(tmp_path.iterdir())]
    assert all("no rank" in s.reason for s in report.analyse(paths).skipped)
    found = report.analyse(paths, re.compile(r"host(\d+)-"))
    assert report.conclude(found).ranks == (2,)


def test_an_extra_collective_on_one_rank_is_the_cause_not_the_ranks_left_behind(tmp_path):
    """Rank 0 issues an extra scalar all_reduce at #3 (`if rank == 0: all_reduce(loss)`): its
    later collectives pair with the others' earlier ones, so it ends one ahead. The cause is
    rank 0's mismatch at #3, not ranks 1 and 2 being behind at the end."""
    for rank in range(3):
        raw = json.loads((HANG / "json" / f"fr_rank_{rank}.json").read_bytes())
        entries = [e for e in raw["entries"] if e["collective_seq_id"] <= 6]
        if rank == 0:
            extra = dict(entries[2], input_sizes=[[]], output_sizes=[[]])
            entries = (
                entries[:2]
                + [extra]
                + [
                    dict(
                        e,
                        collective_seq_id=e["collective_seq_id"] + 1,
                        record_id=e["record_id"] + 1,
                    )
                    for e in entries[2:]
                ]
            )
        raw["entries"] = entries
        raw["pg_status"]["0"]["last_enqueued_collective"] = str(entries[-1]["collective_seq_id"])
        (tmp_path / f"r{rank}.json").write_text(json.dumps(raw))
    found = report.analyse([(str(p), str(p)) for p in sorted(tmp_path.iterdir())])
    group = found.groups[0]
    assert group.mismatch.seq == 3 and group.mismatch.minority == (0,)
    assert [c.rank for c in group.culprits] == [1, 2]  # behind at the end: the effect
    conclusion = report.conclude(found)
    assert conclusion.entry == report.DESYNC and conclusion.ranks == (0,)
    assert conclusion.evidence[0].rank == 0 and conclusion.evidence[0].line == 2
    assert any(w.startswith("then ranks 1-2 never issued #7") for w in conclusion.why)


def test_pickle_and_json_dumps_mixed_are_said_and_still_aligned():
    mixed = [*files("dumps")[:2], (str(HANG / "json" / "fr_rank_2.json"),) * 2]
    found = report.analyse(mixed)
    assert any(n.startswith("dumps mix json (1) and pickle (2)") for n in found.notes)
    assert report.conclude(found).ranks == (2,)


def test_stacks_alone_point_at_the_rank_that_is_elsewhere():
    found = report.analyse(files("pyspy"))
    assert found.traces == 0 and found.stacks.minority == (2,)
    conclusion = report.conclude(found)
    assert conclusion.ranks == (2,) and "load_batch" in conclusion.look_at


def test_coloured_py_spy_output_reads_like_plain_output():
    plain = (HANG / "pyspy" / "pyspy_rank_2.txt").read_text()
    coloured = re.sub(r"^(\s+)(\S+) \(", "\\1\x1b[32m\\2\x1b[0m (", plain, flags=re.M)
    coloured = coloured.replace("Process ", "Process \x1b[33m\x1b[1m", 1)
    assert coloured != plain and stacks.sniff_stack(coloured) == "py-spy"
    assert stacks.parse_stacks(coloured, "c", 2) == stacks.parse_stacks(plain, "c", 2)


def _collective(pg_id: int, seq: int, created_ns: int) -> dict:
    return {
        "record_id": seq,
        "pg_id": pg_id,
        "process_group": ("", ""),  # torch 2.13's default group, and DETAIL's helper group
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "profiling_name": "gloo:all_reduce" if pg_id == 0 else "gloo:all_gather",
        "input_sizes": [[32, 32]] if pg_id == 0 else [[8]],
        "output_sizes": [[32, 32]] if pg_id == 0 else [[8]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": "completed",
        "retired": True,
        "time_created_ns": created_ns,
        "timeout_ms": 5000,
        "is_p2p": False,
    }


def _write(folder: Path, rank: int, entries: list[dict]) -> None:
    dump = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries}
    (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def test_unnamed_groups_are_told_apart_by_pg_id(tmp_path):
    # TORCH_DISTRIBUTED_DEBUG=DETAIL on torch 2.13 gloo: the default group and the wrapper's
    # helper group are both named "", each with its own sequence ids.
    for rank in range(2):
        main = [_collective(0, seq, seq * 10**9) for seq in range(1, 5 - rank)]
        helper = [_collective(1, seq, seq * 10**9) for seq in range(1, 20)]
        _write(tmp_path, rank, main + helper)
    found = report.analyse([(str(p), str(p)) for p in sorted(tmp_path.iterdir())])
    by_name = {g.name: g for g in found.groups}
    assert set(by_name) == {"pg_id 0", "pg_id 1"}
    assert [c.rank for c in by_name["pg_id 0"].culprits] == [1]
    assert by_name["pg_id 0"].diverging_op.startswith("#4 all_reduce")
    assert not by_name["pg_id 1"].culprits


@pytest.mark.parametrize(("lag_ns", "late"), [(2_000, False), (40_000_000, True)])
def test_a_rank_is_late_only_when_it_is_milliseconds_behind(tmp_path, lag_ns, late):
    for rank in range(2):
        entries = [_collective(0, s, s * 10**9 + rank * lag_ns) for s in range(1, 30)]
        _write(tmp_path, rank, entries)
    found = report.analyse([(str(p), str(p)) for p in sorted(tmp_path.iterdir())])
    (group,) = found.groups
    assert (group.late is not None) == late
    if late:
        assert (
            group.late.rank == 1 and group.late.lag_ms == 20.0
        )  # half of 40 ms from the median of two
        assert report.conclude(found).ranks == (1,)
    else:
        assert report.conclude(found) is None


def test_the_memory_cap_is_lifted_after_each_dump():
    import resource

    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(DumpError):
        load_bytes(b"\x80\x02}r" + (10**9).to_bytes(4, "little") + b".", "x")
    assert load_bytes(HANG.joinpath("dumps", "nccl_trace_rank_0").read_bytes(), "r0")["entries"]
    assert resource.getrlimit(resource.RLIMIT_AS) == before
