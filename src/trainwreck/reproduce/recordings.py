"""GPU recordings: recordings/<id>.ipynb and its evidence, committed from a CUDA host so hosts
without a GPU can show that run (while it is still the run of the current source)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from trainwreck.model import Problem, display_path
from trainwreck.reproduce.layout import Layout, atomic_write, base_record, evidence_files
from trainwreck.reproduce.records import Host, RunError, RunRecord, Status, Versions
from trainwreck.reproduce.source import read_notebook_json, source_hash, with_current_prose
from trainwreck.reproduce.targets import Target

MAX_RECORDED_FILE = 10 << 20  # evidence files larger than this stay out of git


def recording_path(root: Path, entry_id: str) -> Path:
    return root / "recordings" / f"{entry_id}.ipynb"


def recording_state(
    root: Path,
    entry_id: str,
    notebook: dict[str, Any],
    reproduction: dict[str, Any],
) -> tuple[str, dict[str, Any], str]:
    """("none" | "current" | "stale" | "invalid", provenance, reason) of recordings/<id>.ipynb."""
    path = recording_path(root, entry_id)
    if not path.is_file():
        return "none", {}, ""
    try:
        recorded = read_notebook_json(path)
    except (OSError, ValueError) as exc:
        return "invalid", {}, f"cannot read the recording: {exc}"
    provenance = recorded.get("metadata", {}).get("trainwreck", {}).get("provenance")
    if not isinstance(provenance, dict) or not provenance.get("source_hash"):
        return "invalid", {}, "recording has no metadata.trainwreck.provenance.source_hash"
    scale = str(provenance.get("scale", "ci"))
    current = source_hash(notebook, reproduction, scale=scale)
    if provenance["source_hash"] != current:
        return (
            "stale",
            provenance,
            f"stale GPU recording: recorded for source_hash {provenance['source_hash'][:12]}, "
            f"the current notebook hashes to {current[:12]}; re-record it on a GPU "
            "(trainwreck reproduce on a CUDA host) or delete it",
        )
    return "current", provenance, ""


def recording_problems(
    entry_id: str, root: Path, notebook: dict[str, Any], reproduction: dict[str, Any]
) -> list[Problem]:
    state, _provenance, reason = recording_state(root, entry_id, notebook, reproduction)
    if state in ("stale", "invalid"):
        display = display_path(recording_path(root, entry_id), root)
        return [Problem(display, 1, 1, "metadata.trainwreck.provenance", reason)]
    return []


def recorded_gpu_record(
    target: Target, layout: Layout, notebook: dict[str, Any], scale: str = "ci"
) -> RunRecord:
    """The record of a GPU notebook on a host without CUDA: its current recording when there is
    one (the executed copy goes into place), else skipped or stale."""
    state, provenance, reason = recording_state(
        layout.root, target.id, notebook, target.reproduction
    )
    digest = source_hash(notebook, target.reproduction, scale=scale)
    if state == "none":
        return base_record(target, layout, Status.SKIPPED_NEEDS_GPU, digest)
    if state != "current":
        record = base_record(target, layout, Status.STALE, digest)
        return dataclasses.replace(record, error=RunError(-1, "", reason))
    record = base_record(target, layout, Status.RECORDED_GPU, provenance["source_hash"])
    executed = layout.executed(target.id)
    executed.parent.mkdir(parents=True, exist_ok=True)
    recording = recording_path(layout.root, target.id)
    try:  # same code as the current notebook (same hash): show the current prose
        atomic_write(
            executed,
            with_current_prose(
                recording.read_text(encoding="utf-8"), layout.root / target.notebook
            ),
        )
    except (OSError, ValueError):
        shutil.copy2(recording, executed)
    versions = provenance.get("versions") or {}
    recorded_evidence = layout.root / "recordings" / target.id
    return dataclasses.replace(
        record,
        executed=layout.rel(executed),
        host=Host(provenance.get("host"), provenance.get("gpu"), provenance.get("driver")),
        versions=Versions(versions.get("python"), versions.get("torch"), versions.get("cuda")),
        started=provenance.get("date") or record.started,
        duration_s=float(provenance.get("duration_s") or 0.0),
        evidence=(
            evidence_files(layout, recorded_evidence)
            if recorded_evidence.is_dir()
            else record.evidence
        ),
    )


def write_recording(layout: Layout, record: RunRecord) -> str:
    """Copy a passed GPU run to recordings/<id>.ipynb (the executed notebook, whose metadata
    carries its provenance) and recordings/<id>/ (its evidence, files over 10 MiB left out)."""
    entry_id = record.id
    target = recording_path(layout.root, entry_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(layout.root / str(record.executed), target)
    folder = layout.root / "recordings" / entry_id
    shutil.rmtree(folder, ignore_errors=True)
    source = layout.root / str(record.evidence.dir)
    for path in sorted(source.rglob("*")):
        if path.is_file() and path.stat().st_size <= MAX_RECORDED_FILE:
            destination = folder / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
    return layout.rel(target)
