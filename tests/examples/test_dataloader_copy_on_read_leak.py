"""dataloader-copy-on-read-leak: the packed dataset returns every caption from two numpy arrays, in
forked workers too; the probe records the workers' memory; the heap freeze freezes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "dataloader-copy-on-read-leak"


def test_packed_captions_come_back_whole_in_forked_workers(tmp_path: Path) -> None:
    driver = """
import multiprocessing
from torch.utils.data import DataLoader
texts = [f"caption {i} " + "é" * (i % 5) for i in range(1000)]
ds = Captions(texts)
assert len(ds) == 1000 and [ds[i] for i in range(1000)] == texts
# the dataset is two arrays, not 1000 Python strings
assert {k: type(v).__name__ for k, v in vars(ds).items()} == {"offsets": "ndarray", "blob": "ndarray"}
loader = DataLoader(ds, batch_size=100, num_workers=2,
                    multiprocessing_context=multiprocessing.get_context("fork"))
assert [t for batch in loader for t in batch] == texts
print("whole")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "whole" in result.stdout


def test_the_probe_records_the_workers_memory(tmp_path: Path) -> None:
    prelude = """
import multiprocessing, torch
from torch.utils.data import DataLoader
loader = DataLoader(list(range(400)), batch_size=4, num_workers=2, persistent_workers=True,
                    multiprocessing_context=multiprocessing.get_context("fork"))
train_step = lambda batch: torch.as_tensor(batch).sum()
"""
    result = run(prelude + example(ENTRY, "code_examples[1]"), tmp_path)
    assert result.returncode == 0, result.output
    events = [
        json.loads(line)
        for path in sorted((tmp_path / "runs" / "exp1").rglob("*"))
        if path.is_file()
        for line in path.read_text().splitlines()
        if '"host_memory"' in line
    ]
    assert [e["step"] for e in events] == [50, 100], events
    assert all(e["workers"] == 2 and e["workers_uss_bytes"] > 0 for e in events), events


def test_the_heap_is_frozen_before_the_workers_start(tmp_path: Path) -> None:
    code = example(ENTRY, "fix.fallback.steps[1]") + "\nassert gc.get_freeze_count() > 0\n"
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
