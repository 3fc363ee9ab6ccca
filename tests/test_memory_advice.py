"""diagnose's OOM findings that a snapshot replay answers tell the user how to record one (the
probe's OOM observer) and to run `trainwreck memory replay`; other findings do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainwreck.diagnose import diagnose
from trainwreck.memory.advice import REPLAY_NOTES
from trainwreck.probe import oom_snapshot

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "logs"


@pytest.mark.parametrize(
    ("log", "entry"),
    [
        ("cuda-allocator-fragmentation/oom-current-hf-trainer.log", "cuda-allocator-fragmentation"),
        ("cuda-oom-capacity/oom-current-hf-trainer.log", "cuda-oom-capacity"),
    ],
)
def test_an_oom_finding_says_how_to_record_a_snapshot_and_replay_it(log, entry):
    report = diagnose([str(LOGS / log)], ROOT, use_installed=False)
    finding = next(f for f in report.findings if f.entry == entry)
    (note,) = [n for n in finding.notes if "trainwreck memory replay SNAPSHOT" in n]
    assert note == REPLAY_NOTES[entry]


def test_the_note_names_the_probes_real_function_and_file_name():
    assert callable(oom_snapshot.record_oom_snapshots)
    written = oom_snapshot.FILE_TEMPLATE.format(rank="{R}", count=0)
    for note in REPLAY_NOTES.values():
        assert "oom_snapshot.record_oom_snapshots(DIR)" in note and f"DIR/{written}" in note


def test_a_hang_finding_gets_no_replay_note():
    hang = ROOT / "tests" / "forensics" / "timeout-gloo" / "logs"
    report = diagnose([str(hang)], ROOT, use_installed=False)
    assert report.findings
    assert not any("memory replay" in n for f in report.findings for n in f.notes)
