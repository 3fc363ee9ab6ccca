"""fastread against the plain path: on every dump it takes, the mapping, the trace and the whole
analysis equal what SafeUnpickler and the per-entry trace give; on every dump it does not take
(or cannot read), the error is the old one, word for word."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainwreck.forensics import fastread, report
from trainwreck.forensics.dumps import DumpError, read_raw
from trainwreck.forensics.traces import RankTrace, Signatures, trace

HERE = Path(__file__).parent / "forensics"
REAL = sorted(
    [
        *(HERE / "hang-gloo" / "dumps").iterdir(),
        *(HERE / "timeout-gloo" / "flight-recorder").iterdir(),
    ]
)


def expand(segments: fastread.Segments) -> list[Any]:
    out: list[Any] = []
    for item in segments.items:
        if isinstance(item, fastread.Run):
            for k in range(item.count):
                row = item.row(k)
                for key, column in item.columns.items():
                    assert row[key] == column[k]
                out.append(row)
        else:
            out.append(item)
    return out


def assert_same_trace(a: RankTrace, b: RankTrace) -> None:
    assert (a.file, a.kind, a.rank, a.version, a.group_ranks, a.p2p, a.bad_entries) == (
        b.file, b.kind, b.rank, b.version, b.group_ranks, b.p2p, b.bad_entries
    )  # fmt: skip
    assert list(a.groups) == list(b.groups)
    for name, x in a.groups.items():
        y = b.groups[name]
        for column in ("seqs", "sigs", "times", "record_ids"):
            assert np.array_equal(getattr(x, column), getattr(y, column)), (name, column)
        assert (x.name, x.desc, x.pg_id, x.status, x.tail, x.started_not_done) == (
            y.name, y.desc, y.pg_id, y.status, y.tail, y.started_not_done
        )  # fmt: skip


def compare(paths: list[Path]) -> int:
    """Trace every dump both ways (one Signatures each, as report does); how many fastread took."""
    old, new = Signatures(), Signatures()
    taken = 0
    for path in paths:
        raw, header = read_raw(str(path))
        fast_raw, fast_header = read_raw(str(path), fast=True)
        taken += isinstance(fast_raw["entries"], fastread.Segments)
        assert_same_trace(trace(raw, header, old), trace(fast_raw, fast_header, new))
    assert list(old.ids) == list(new.ids)  # the same signatures, numbered in the same order
    return taken


def entry(seq: int, rank: int, **changes: Any) -> dict[str, Any]:
    record = {
        "frames": [
            {
                "name": "all_reduce",
                "filename": "/v/site-packages/torch/distributed/c10d.py",
                "line": 3,
            },
            {"name": "step", "filename": "/job/train.py", "line": 100 + seq % 7},
        ],
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "thread_name": "python",
        "thread_id": "140354875300736",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1_700_000_000_000_000_000 + seq * 1_000_000 + rank * 13,
        "duration_ms": 1.25 + seq % 3,
        "input_sizes": [[4096, 1024 + (seq % 3 == 0)]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4096, 1024]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    record.update(changes)
    return record


def dump(records: list[Any], ranks: int = 4) -> dict[str, Any]:
    last = max((r["collective_seq_id"] for r in records if isinstance(r, dict)), default=-1)
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": last,
                "last_completed_collective": last - 1,
            }
        },
        "entries": records,
    }


def write(folder: Path, rank: int, content: dict[str, Any], protocol: int = 2) -> Path:
    path = folder / f"nccl_trace_rank_{rank}"
    path.write_bytes(pickle.dumps(content, protocol=protocol))
    return path


def test_the_real_dumps_read_the_same_and_trace_the_same():
    for path in REAL:
        data = path.read_bytes()
        parsed = fastread.parse(data)
        assert parsed is not None, path
        top, segments = parsed
        plain = pickle.loads(data)
        assert expand(segments) == plain.pop("entries")
        assert {k: v for k, v in top.items() if k != "entries"} == plain
    assert compare(REAL) == len(REAL)


def _no_fastread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastread, "parse", lambda data: None)


@pytest.mark.parametrize("folders", [("hang-gloo/dumps", "hang-gloo/faulthandler"),
                                     ("timeout-gloo/flight-recorder", "timeout-gloo/py-spy")])  # fmt: skip
def test_the_whole_analysis_of_the_real_dumps_is_unchanged(folders, monkeypatch):
    files = [(str(p), str(p)) for f in folders for p in sorted((HERE / f).iterdir())]
    new = report.analyse(files)
    _no_fastread(monkeypatch)
    old = report.analyse(files)
    assert new.groups == old.groups and new.skipped == old.skipped and new.notes == old.notes
    assert report.conclude(new) == report.conclude(old)


SYNTHETIC = {
    # name: (records of rank r, pickle protocol)
    "long-run": (lambda r: [entry(s, r) for s in range(1001, 3001 - (r == 1))], 2),
    "protocol-4-frames-memoize": (lambda r: [entry(s, r) for s in range(1, 1500)], 4),
    "protocol-5": (lambda r: [entry(s, r) for s in range(60000, 66000)], 5),
    "seq-ids-cross-255-and-65535": (
        lambda r: [entry(s, r) for s in [*range(200, 300), *range(65500, 65600)]],
        2,
    ),
    "one-left-over-append": (lambda r: [entry(s, r) for s in range(1, 1002)], 2),
    "started-tail": (
        lambda r: [
            entry(s, r, state="started" if s > 97 - r else "completed") for s in range(1, 100)
        ],
        2,
    ),
    "fields-missing": (
        lambda r: [
            {
                k: v
                for k, v in entry(s, r).items()
                if k not in ("frames", "thread_id", "duration_ms", "time_discovered_started_ns")
            }
            for s in range(1, 300)
        ],
        2,
    ),
    "old-key-set": (
        lambda r: [
            {
                k: v
                for k, v in entry(s, r).items()
                if k
                in (
                    "record_id",
                    "pg_id",
                    "process_group",
                    "collective_seq_id",
                    "profiling_name",
                    "time_created_ns",
                    "input_sizes",
                    "output_sizes",
                    "state",
                    "frames",
                )
            }
            for s in range(1, 300)
        ],
        2,
    ),
    "time-none": (lambda r: [entry(s, r, time_created_ns=None) for s in range(1, 200)], 2),
    "two-groups": (
        lambda r: [
            entry(s // 2, r, process_group=("1" if s % 2 else "0", "g"), pg_id=s % 2)
            for s in range(2, 400)
        ],
        2,
    ),
    "unnamed-groups": (
        lambda r: [
            entry(s // 2, r, process_group=("", "default_pg"), pg_id=s % 2) for s in range(2, 400)
        ],
        2,
    ),
    "not-ascending": (lambda r: [entry(s, r) for s in [*range(500, 600), *range(100, 200)]], 2),
    "mismatch-on-rank-2": (
        lambda r: [
            entry(s, r, input_dtypes=["BFloat16" if r == 2 and s == 150 else "Float"])
            for s in range(1, 300)
        ],
        2,
    ),
    "many-sizes": (lambda r: [entry(s, r, input_sizes=[[s % 97, 8]]) for s in range(1, 800)], 2),
    "p2p": (
        lambda r: [
            entry(
                s,
                r,
                is_p2p=s % 5 == 0,
                profiling_name="nccl:send 0->1" if s % 5 == 0 else "nccl:all_reduce",
            )
            for s in range(1, 300)
        ],
        2,
    ),
    "bool-and-float-ids": (
        lambda r: [
            entry(
                s, r, record_id=True if s == 7 else s, collective_seq_id=float(s) if s == 9 else s
            )
            for s in range(1, 300)
        ],
        2,
    ),
    "ids-beyond-int64": (
        lambda r: [entry(s, r, time_created_ns=2**70 if s == 5 else s) for s in range(1, 99)],
        2,
    ),
    "not-dicts": (lambda r: [entry(s, r) if s % 50 else [s] for s in range(1, 300)], 2),
    "shared-entry-objects": (lambda r: [entry(5, r)] * 300, 2),
}


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_dumps_trace_the_same_and_analyse_the_same(name, tmp_path, monkeypatch):
    make, protocol = SYNTHETIC[name]
    paths = [write(tmp_path, rank, dump(make(rank)), protocol) for rank in range(4)]
    compare(paths)
    files = [(str(p), str(p)) for p in paths]
    new = report.analyse(files)
    _no_fastread(monkeypatch)
    old = report.analyse(files)
    assert new.groups == old.groups and new.skipped == old.skipped and new.notes == old.notes


def test_the_long_runs_are_read_as_runs():
    data = pickle.dumps(dump([entry(s, 0) for s in range(1001, 3001)]), protocol=2)
    _, segments = fastread.parse(data)
    runs = [i for i in segments.items if isinstance(i, fastread.Run)]
    assert sum(r.count for r in runs) > 1900 and len(segments.items) < 20


def _error(data: bytes, tmp_path: Path, fast: bool) -> str:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    try:
        raw, header = read_raw(str(path), fast=fast)
        result = trace(raw, header, Signatures())
    except DumpError as exc:
        return "error: " + exc.message
    return repr((header, [(g.name, g.seqs.tolist(), g.tail) for g in result.groups.values()]))


def test_truncated_flipped_and_hostile_bytes_give_the_old_answer(tmp_path):
    good = pickle.dumps(dump([entry(s, 0) for s in range(1, 40)]), protocol=2)
    real = REAL[0].read_bytes()
    cases = [good[:n] for n in range(0, len(good), 97)] + [
        real[:n] for n in range(0, len(real), 41)
    ]
    rng = random.Random(24)
    for _ in range(150):
        flipped = bytearray(good if rng.random() < 0.5 else real)
        for _ in range(rng.randint(1, 3)):
            flipped[rng.randrange(2, len(flipped))] = rng.randrange(256)
        cases.append(bytes(flipped))
    cases.append(pickle.dumps({"version": "2.10", "entries": [entry(1, 0), os.system]}, protocol=2))
    cases.append(good.replace(b"nccl:all_reduce", b"nccl:all_reduc\xff", 1))
    for data in cases:
        assert _error(data, tmp_path, fast=True) == _error(data, tmp_path, fast=False)


def test_a_global_is_never_resolved_by_fastread():
    data = pickle.dumps({"version": "2.10", "entries": [entry(1, 0), os.system]}, protocol=2)
    assert fastread.parse(data) is None  # handed to SafeUnpickler, which refuses it
