"""trainwreck.probe.prometheus: the probe's files as Prometheus metrics (a real probe run, read
incrementally; the exposition checked by prometheus_client's parser and by promtool)."""

from __future__ import annotations

import gc
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client", reason="prometheus_client is not installed")

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trainwreck.probe import Probe
from trainwreck.probe.prometheus import ProbeCollector, registry_for


def samples(folder: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry_for(folder)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_probe_run_becomes_metrics(tmp_path):
    probe = Probe(tmp_path, rank=0, world_size=2, flush_interval=0.01)
    for _ in range(5):
        with probe.step():
            pass
    gc.collect()  # a generation 2 collection: always recorded
    probe.log(loss=float("nan"), lr=0.001)
    probe.close()
    other = tmp_path / "probe-rank1.jsonl"
    other.write_text(
        json.dumps(
            {
                "v": 1,
                "t": 1.5,
                "rank": 1,
                "event": "cuda_memory",
                "alloc_retries": 7,
                "reserved_bytes": 2048,
                "allocated_bytes": 1024,
                "ooms": 0,
            }
        )
        + "\n"
        + "not json\n"
        + json.dumps(
            {
                "v": 1,
                "t": 2.0,
                "rank": 1,
                "event": "step",
                "step": 0,
                "duration_ms": 250.0,
                "gc_ms": 0.0,
            }
        )
        + "\n"
    )
    found = samples(tmp_path)
    assert found[("trainwreck_step_seconds_count", (("rank", "0"),))] == 5
    assert found[("trainwreck_step_seconds_count", (("rank", "1"),))] == 1
    assert found[("trainwreck_step_seconds_bucket", (("le", "0.25"), ("rank", "1")))] == 1
    assert found[("trainwreck_step_seconds_bucket", (("le", "0.1"), ("rank", "1")))] == 0
    assert found[("trainwreck_gc_pause_seconds_count", (("generation", "2"), ("rank", "0")))] >= 1
    assert math.isnan(found[("trainwreck_metric", (("name", "loss"), ("rank", "0")))])
    assert found[("trainwreck_metric", (("name", "lr"), ("rank", "0")))] == 0.001
    assert found[("trainwreck_cuda_alloc_retries_total", (("rank", "1"),))] == 7
    assert found[("trainwreck_cuda_reserved_bytes", (("rank", "1"),))] == 2048


def test_files_are_read_incrementally_and_partial_lines_wait(tmp_path):
    path = tmp_path / "probe-rank0.jsonl"
    step = {"v": 1, "t": 1.0, "rank": 0, "event": "step", "step": 0, "duration_ms": 10.0}
    line = json.dumps(step)
    path.write_text(line + "\n" + line[:20])
    collector = ProbeCollector(tmp_path)
    collector.update()
    assert collector.ranks["0"].steps.n == 1
    with path.open("a") as handle:
        handle.write(line[20:] + "\n")
    collector.update()
    assert collector.ranks["0"].steps.n == 2
    collector.update()  # nothing new: nothing counted twice
    assert collector.ranks["0"].steps.n == 2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_exposition(tmp_path):
    probe = Probe(tmp_path, rank=0, flush_interval=0.01)
    with probe.step():
        pass
    probe.log(loss=1.0)
    probe.close()
    text = generate_latest(registry_for(tmp_path))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
