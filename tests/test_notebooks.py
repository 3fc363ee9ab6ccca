"""Every reproduction notebook this host can run, executed for real at ci scale.

A notebook's own asserts are its test: a notebook whose fingerprint does not show, or whose fix
does not remove it, fails here with the cell and the error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainwreck.reproduce import Target, discover, format_failure

REPO = Path(__file__).resolve().parents[1]
TARGETS: list[Target] = discover(REPO)
CPU = [t.id for t in TARGETS if t.device == "cpu" and t.not_reproducible is None]
GPU = [t.id for t in TARGETS if t.device == "gpu" and t.not_reproducible is None]
# The entry each run reproduces (a run of an entry's second reproduction has its own id).
ENTRY = {t.id: t.entry_id for t in TARGETS}
# Replays of a model (reproduction.replay) run no training, so they write no training logs for
# the rules; their metrics, figure and asserts are still checked.
REPLAYS = {t.id for t in TARGETS if t.reproduction.get("replay")}


def _record(manifest: dict[str, Any], entry_id: str) -> dict[str, Any]:
    records = {r["id"]: r for r in manifest["notebooks"]}
    assert entry_id in records, f"{entry_id} missing from build/manifest.json"
    return records[entry_id]


def _artifact(record: dict[str, Any], path: str) -> Path:
    """Where to read a passed run's file: its copy in build/cache/<source_hash>/, which nothing
    overwrites (build/executed and build/evidence are rewritten by any later run in this tree,
    e.g. a colleague re-running an edited notebook while these tests read)."""
    cache = REPO / "build" / "cache" / record["source_hash"]
    if path == record["executed"]:
        return cache / "executed.ipynb"
    prefix = record["evidence"]["dir"] + "/"
    if path.startswith(prefix):
        return cache / "evidence" / path[len(prefix) :]
    return REPO / path


@pytest.mark.parametrize("entry_id", CPU)
def test_cpu_notebook_passes(reproduced_manifest: dict[str, Any], entry_id: str) -> None:
    record = _record(reproduced_manifest, entry_id)
    assert record["status"] == "passed", format_failure(record)
    executed = _artifact(record, record["executed"])
    assert executed.is_file()
    provenance = json.loads(executed.read_text())["metadata"]["trainwreck"]["provenance"]
    assert provenance["source_hash"] == record["source_hash"]


@pytest.mark.parametrize("entry_id", CPU)
def test_cpu_notebook_writes_evidence(reproduced_manifest: dict[str, Any], entry_id: str) -> None:
    record = _record(reproduced_manifest, entry_id)
    if record["status"] != "passed":
        pytest.skip("the notebook failed (reported by test_cpu_notebook_passes)")
    evidence = record["evidence"]
    if entry_id in REPLAYS:
        assert not evidence["logs"]["broken"] and not evidence["logs"]["fixed"], (
            f"{entry_id} replays a model: a log it wrote would pass for a training run's"
        )
    else:
        assert evidence["logs"]["broken"], f"{entry_id}: no log in {evidence['dir']}/broken/"
        assert evidence["logs"]["fixed"], f"{entry_id}: no log in {evidence['dir']}/fixed/"
    assert evidence["metrics"], f"{entry_id}: no {evidence['dir']}/metrics.json"
    json.loads(_artifact(record, evidence["metrics"]).read_text())
    assert evidence["figures"], f"{entry_id}: no figure (PNG) in {evidence['dir']}"
    for path in [*evidence["logs"]["broken"], *evidence["logs"]["fixed"], *evidence["figures"]]:
        assert _artifact(record, path).is_file(), path


@pytest.mark.parametrize("entry_id", GPU)
def test_gpu_notebook_is_never_faked(reproduced_manifest: dict[str, Any], entry_id: str) -> None:
    from trainwreck.reproduce import cuda_available

    record = _record(reproduced_manifest, entry_id)
    if cuda_available():
        assert record["status"] == "passed", format_failure(record)
    else:
        assert record["status"] in ("skipped-needs-gpu", "recorded-gpu", "stale"), record["status"]
        if record["status"] != "recorded-gpu":
            assert record["executed"] is None


def test_gc_straggler_fingerprint_numbers(reproduced_manifest: dict[str, Any]) -> None:
    """The seed notebook's measured numbers, as written to its metrics.json."""
    record = _record(reproduced_manifest, "python-gc-straggler")
    if record["status"] != "passed":
        pytest.skip("the notebook failed (reported by test_cpu_notebook_passes)")
    metrics = json.loads(_artifact(record, record["evidence"]["metrics"]).read_text())
    broken, fixed = metrics["broken"], metrics["fixed_freeze"]
    assert broken["rank0_gen2_median_ms"] >= 150
    aligned = broken["stalls_aligned_with_gen2"]
    assert all(n >= 3 for n in aligned)
    for a, s in zip(aligned, broken["stalls_per_rank"], strict=True):
        assert s - a <= s // 4  # stalls from other processes on a shared machine: a minority
    assert fixed["max_gen2_ms"] < 0.1 * broken["rank0_gen2_median_ms"]
    # A stray stall from another process on a shared machine is tolerated, a pattern is not.
    for after in (fixed["stalls_per_rank"], metrics["scheduled"]["stalls_per_rank"]):
        for n, before in zip(after, aligned, strict=True):
            assert n <= max(2, before // 2)


def test_fragmentation_replay_fingerprint_numbers(reproduced_manifest: dict[str, Any]) -> None:
    """The CPU replay's measured numbers, as written to its metrics.json: a fragmentation OOM
    under the default rules (the live tensors and the request fit, the request does not fit
    the largest free block although more than it is reserved but unallocated), none with
    expandable segments in the same capacity."""
    record = _record(reproduced_manifest, "cuda-allocator-fragmentation-replay")
    if record["status"] != "passed":
        pytest.skip("the notebook failed (reported by test_cpu_notebook_passes)")
    metrics = json.loads(_artifact(record, record["evidence"]["metrics"]).read_text())
    capacity, broken, fixed = metrics["capacity_bytes"], metrics["broken"], metrics["fixed"]
    oom = broken["first_oom"]
    assert oom is not None and broken["ooms"] >= 1
    assert oom["allocated_bytes"] + oom["requested_bytes"] <= capacity
    assert oom["reserved_minus_allocated_bytes"] >= oom["requested_bytes"]
    assert oom["largest_free_block_bytes"] < oom["requested_bytes"]
    assert fixed["ooms"] == 0 and fixed["first_oom"] is None
    assert fixed["peak_reserved_bytes"] <= capacity
    assert metrics["peak_reserved_unlimited_bytes"] > metrics["peak_allocated_unlimited_bytes"]


@pytest.mark.parametrize("entry_id", CPU)
def test_rules_diagnose_broken_and_not_fixed(
    reproduced_manifest: dict[str, Any], entry_id: str
) -> None:
    """The loop closes: the compiled rules find this entry in the broken run's logs, and find
    nothing in the fixed run's logs."""
    diagnose = pytest.importorskip("trainwreck.diagnose").diagnose
    if entry_id in REPLAYS:
        pytest.skip("a replay of a model runs no training: no logs for the rules")
    record = _record(reproduced_manifest, entry_id)
    if record["status"] != "passed":
        pytest.skip("the notebook failed (reported by test_cpu_notebook_passes)")
    logs = record["evidence"]["logs"]
    if not logs["broken"] or not logs["fixed"]:
        pytest.skip("no evidence logs (reported by test_cpu_notebook_writes_evidence)")
    broken = diagnose(
        [str(_artifact(record, p)) for p in logs["broken"]], REPO, use_installed=False
    )
    assert ENTRY[entry_id] in broken.entries, f"broken/ of {entry_id} diagnosed as {broken.entries}"
    fixed = diagnose([str(_artifact(record, p)) for p in logs["fixed"]], REPO, use_installed=False)
    assert fixed.entries == [], f"fixed/ of {entry_id} diagnosed as {fixed.entries}"


def test_gc_straggler_plain_logs_alone_are_enough(reproduced_manifest: dict[str, Any]) -> None:
    """Without the probe's JSON lines, the per-rank step lines alone still show the failure."""
    diagnose = pytest.importorskip("trainwreck.diagnose").diagnose
    record = _record(reproduced_manifest, "python-gc-straggler")
    if record["status"] != "passed":
        pytest.skip("the notebook failed (reported by test_cpu_notebook_passes)")
    for run, expected in (("broken", ["python-gc-straggler"]), ("fixed", [])):
        logs = [
            str(_artifact(record, p)) for p in record["evidence"]["logs"][run] if p.endswith(".log")
        ]
        assert len(logs) == 2, logs
        report = diagnose(logs, REPO, use_installed=False)
        assert report.entries == expected, (run, report.entries)
