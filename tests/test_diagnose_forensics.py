"""`trainwreck diagnose` on Flight Recorder and stack dumps beside logs: one finding with the
culprit rank, hostile dumps as one line each, --rank-from."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

from trainwreck.diagnose import diagnose

ROOT = Path(__file__).resolve().parents[1]
HANG = ROOT / "tests" / "forensics" / "hang-gloo"
TIMEOUT_LOG = ROOT / "tests" / "logs" / "nccl-collective-timeout" / "gloo-cpu-hf-trainer.log"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainwreck", "diagnose", "--no-installed", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_dumps_alone_name_the_culprit_rank():
    report = diagnose([str(HANG / "dumps"), str(HANG / "pyspy")], ROOT, use_installed=False)
    (finding,) = report.findings
    assert finding.entry == "nccl-collective-timeout" and finding.initiating_rank == 2
    assert finding.rule == "flight-recorder"
    assert finding.notes[0].startswith("look at rank 2: never issued #7 all_reduce")
    assert finding.evidence[0].file.endswith("nccl_trace_rank_2")
    assert report.stats.files == 6 and not report.nothing_read


def test_a_timeout_log_and_the_dumps_make_one_finding_not_two():
    alone = diagnose([str(TIMEOUT_LOG)], ROOT, use_installed=False)
    assert "nccl-collective-timeout" in alone.entries
    report = diagnose([str(TIMEOUT_LOG), str(HANG / "dumps")], ROOT, use_installed=False)
    hang = [f for f in report.findings if f.entry == "nccl-collective-timeout"]
    assert len(hang) == 1 and hang[0].initiating_rank == 2
    assert "flight-recorder" in hang[0].rules and len(hang[0].rules) > 1  # the log's rules too
    assert any(e.file == str(TIMEOUT_LOG) for e in hang[0].evidence)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["BOOM_FILE"],))


def test_hostile_and_broken_dumps_are_one_line_each_and_the_rest_is_analysed(tmp_path):
    marker = tmp_path / "ran"
    folder = tmp_path / "dumps"
    shutil.copytree(HANG / "dumps", folder)
    os.environ["BOOM_FILE"] = str(marker)
    try:
        evil = pickle.dumps({"version": "2.10", "entries": [_Boom()]}, protocol=2)
    finally:
        del os.environ["BOOM_FILE"]
    (folder / "nccl_trace_rank_5").write_bytes(evil)
    (folder / "nccl_trace_rank_6").write_bytes(
        (HANG / "dumps" / "nccl_trace_rank_0").read_bytes()[:87]
    )
    (folder / "fr_rank_1.json").write_bytes((HANG / "json" / "fr_rank_1.json").read_bytes())
    done = cli(str(folder), "--format", "json")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert not marker.exists()
    data = json.loads(done.stdout)
    reasons = {Path(s["file"]).name: s["reason"] for s in data["skipped"]}
    assert reasons["nccl_trace_rank_5"].startswith("pickle refused: refused global")
    assert "truncated" in reasons["nccl_trace_rank_6"]
    assert "duplicate rank 1" in next(
        r for n, r in reasons.items() if n.startswith(("fr_", "nccl_trace_rank_1"))
    )
    # ranks 5 and 6 were never read, and ranks 0-2 do not name them: the culprit is still rank 2
    (finding,) = data["findings"]
    assert finding["initiating_rank"] == 2


def test_rank_from_and_a_bad_regex(tmp_path):
    for rank in range(3):
        shutil.copy(HANG / "dumps" / f"nccl_trace_rank_{rank}", tmp_path / f"node{rank}.trace")
    done = cli(str(tmp_path), "--format", "json", "--rank-from", r"node(\d+)\.trace")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["findings"][0]["initiating_rank"] == 2
    bad = cli(str(tmp_path), "--rank-from", "node(")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--rank-from" in bad.stderr


def explain(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainwreck", "explain", "flight-recorder", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_explain_prints_the_alignment_table():
    done = explain(str(HANG / "dumps"), str(HANG / "faulthandler"))
    assert done.returncode == 0, done.stderr
    rows = [
        line.split()
        for line in done.stdout.splitlines()
        if line.startswith("  0-1 ") or line.startswith("  2 ")
    ]
    assert rows == [
        ["0-1", "2", "#7", "#6", "gloo:all_reduce"],
        ["2", "1", "#6", "#6", "gloo:barrier"],
    ]
    assert "culprit: rank 2 never issued #7 all_reduce" in done.stdout
    assert "load_batch (make_hang.py:" in done.stdout
    data = json.loads(explain(str(HANG / "json"), "--format", "json").stdout)
    assert data["conclusion"]["ranks"] == [2] and data["groups"][0]["window"] == [1, 6]


def test_explain_on_nothing_readable_exits_3(tmp_path):
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"\x80\x02" + b"\x00" * 85)
    done = explain(str(tmp_path))
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "skipped:" in done.stdout


TIMEOUT_RUN = ROOT / "tests" / "forensics" / "timeout-gloo"


def test_the_timeout_notebooks_real_dumps_name_rank_0_the_all_reduce_and_its_evaluation():
    # Written by notebooks/nccl-collective-timeout.ipynb: rank 0 evaluates alone past gloo's
    # timeout; py-spy's output is coloured there (the Jupyter kernel sets CLICOLOR_FORCE).
    assert "\x1b[" in (TIMEOUT_RUN / "py-spy" / "rank0.txt").read_text()
    report = diagnose(
        [str(TIMEOUT_RUN / "flight-recorder"), str(TIMEOUT_RUN / "py-spy")],
        ROOT,
        use_installed=False,
    )
    (finding,) = report.findings
    assert finding.entry == "nccl-collective-timeout" and finding.initiating_rank == 0
    assert finding.notes[0].startswith(
        "look at rank 0: never issued #17 all_reduce sizes [[64, 64]]"
    )
    assert "its stack is at main (train.py:70) ... evaluate (train.py:31)" in finding.notes[0]
    assert {(Path(e.file).name, e.part) for e in finding.evidence} == {
        ("nccl_trace_rank_0", "dump"),
        ("rank0.txt", "stack"),
    }


def test_the_timeout_notebooks_logs_and_dumps_make_one_finding_on_rank_0():
    report = diagnose([str(TIMEOUT_RUN)], ROOT, use_installed=False)
    hang = [f for f in report.findings if f.entry == "nccl-collective-timeout"]
    assert len(hang) == 1 and hang[0].initiating_rank == 0
    assert "flight-recorder" in hang[0].rules and len(hang[0].rules) > 1
