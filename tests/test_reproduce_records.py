"""The typed run record: build/manifest.json keeps its bytes, statuses are enum members."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainwreck.reproduce.records import RunError, RunRecord, Status, manifest_records

# A record as `trainwreck reproduce` writes it (keys in the manifest's order).
PASSED = {
    "id": "demo",
    "notebook": "notebooks/demo.ipynb",
    "device": "cpu",
    "status": "passed",
    "cached": True,
    "source_hash": "394cf5ed55a2b9f5bcf3b2ad942d8fc5e9049a60a57d6ad779fe0bb829d775c4",
    "executed": "build/executed/demo.ipynb",
    "host": {"cpu": "Intel(R) Xeon(R) Processor (2 logical CPUs)", "gpu": None, "driver": None},
    "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "cuda": None},
    "started": "2026-11-30T15:47:36+00:00",
    "duration_s": 12.71,
    "evidence": {
        "dir": "build/evidence/demo",
        "logs": {"broken": ["build/evidence/demo/broken/train.log"], "fixed": []},
        "metrics": "build/evidence/demo/metrics.json",
        "figures": ["build/evidence/demo/demo.png"],
    },
    "error": None,
}
FAILED = dict(
    PASSED,
    status="failed",
    cached=False,
    error={"cell": 4, "source": "assert x", "message": "AssertionError: x", "output": "x=1"},
)
STALE = dict(
    PASSED,
    status="stale",
    executed=None,
    duration_s=0.0,
    error={"cell": -1, "source": "", "message": "stale GPU recording: ..."},
)


@pytest.mark.parametrize("record", [PASSED, FAILED, STALE], ids=["passed", "failed", "stale"])
def test_a_written_record_reads_back_to_the_same_bytes(record: dict) -> None:
    typed = RunRecord.from_json(record)
    assert json.dumps(typed.to_json(), indent=2) == json.dumps(record, indent=2)
    assert RunRecord.from_json(typed.to_json()) == typed


def test_status_members_are_the_manifest_words() -> None:
    assert [s.value for s in Status] == [
        "passed",
        "failed",
        "skipped-needs-gpu",
        "recorded-gpu",
        "stale",
        "not-reproducible",
    ]
    assert RunRecord.from_json(FAILED).status is Status.FAILED
    assert json.dumps({"status": Status.RECORDED_GPU}) == '{"status": "recorded-gpu"}'
    assert f"{Status.SKIPPED_NEEDS_GPU}" == "skipped-needs-gpu"


def test_a_hand_written_record_reads_leniently() -> None:
    record = RunRecord.from_json({"status": "newer-word", "error": {"cell": "3"}, "host": 7})
    assert record.status == "newer-word" and not isinstance(record.status, Status)
    assert record.error == RunError(None, "", None)
    assert record.host.cpu is None and record.evidence.broken == ()
    assert RunRecord.from_json({}).status is None


def test_manifest_records_skip_records_without_an_id() -> None:
    manifest = {"notebooks": [PASSED, {"status": "passed"}, "junk", dict(FAILED, id="other")]}
    assert list(manifest_records(manifest)) == ["demo", "other"]
    assert manifest_records(None) == {} and manifest_records({"notebooks": None}) == {}


def test_importing_reproduce_leaves_the_execution_side_unloaded() -> None:
    """`trainwreck check` needs the lint and the source hash only."""
    code = (
        "import sys\n"
        "from trainwreck.reproduce import notebook_problems, source_hash\n"
        "loaded = [m for m in ('asyncio', 'trainwreck.reproduce.execution',"
        " 'trainwreck.reproduce.runner', 'trainwreck.reproduce.processes') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "import trainwreck.reproduce as rp\n"
        "assert callable(rp.reproduce) and 'trainwreck.reproduce.runner' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
