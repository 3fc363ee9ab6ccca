"""Tests of trainwreck.probe's recorder: events, schema, GC hook, failure handling, ranks."""

from __future__ import annotations

import errno
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import types
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from trainwreck.probe import Probe, ProbeWarning, detect_rank

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "schemas" / "probe-event.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def kinds(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == kind]


def run_python(
    code: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- the schema itself ---------------------------------------------------------------------------


def test_schema_is_draft_2020_12_and_every_property_is_described() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    missing: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                if not isinstance(sub, dict) or not sub.get("description"):
                    missing.append(f"{where}/properties/{name}")
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(schema, "#")
    assert missing == []


def test_schema_rejects_malformed_events(validator: jsonschema.Draft202012Validator) -> None:
    good = {"v": 1, "t": 1.5, "rank": 0, "event": "step", "step": 3, "duration_ms": 10.0}
    assert list(validator.iter_errors(good)) == []
    for bad in (
        {**good, "v": 2},
        {**good, "duration_ms": -1},
        {**good, "unknown_field": 1},
        {k: v for k, v in good.items() if k != "rank"},
        {
            "v": 1,
            "t": 1.0,
            "rank": 0,
            "event": "gc",
            "generation": 3,
            "duration_ms": 1,
            "collected": 0,
        },
        {"v": 1, "t": 1.0, "rank": 0, "event": "metric", "loss": [1.0]},
    ):
        assert list(validator.iter_errors(bad)), bad


# --- import hygiene ------------------------------------------------------------------------------


def test_import_does_not_pull_heavy_modules(tmp_path: Path) -> None:
    result = run_python(
        """
        import sys
        import trainwreck.probe
        from trainwreck.probe import Probe
        p = Probe("runs")
        with p.step():
            pass
        p.close()
        heavy = [m for m in ("torch", "jupyter", "nbclient", "nbformat", "mkdocs", "matplotlib",
                             "transformers", "lightning", "pytorch_lightning") if m in sys.modules]
        print(heavy)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- events --------------------------------------------------------------------------------------


def test_basic_run_writes_valid_events(
    tmp_path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    probe = Probe(tmp_path / "run", rank=0, world_size=1)
    for _ in range(5):
        with probe.step():
            sum(range(1000))
    probe.log(loss=0.25, tokens_per_s=1234, note="warmup", nan=float("nan"), inf=float("-inf"))
    with probe.step(100):
        pass
    with probe.step():
        pass
    probe.close()

    path = tmp_path / "run" / "probe-rank0.jsonl"
    assert probe.path == path
    events = read_events(path)
    for event in events:
        assert list(validator.iter_errors(event)) == [], event
        assert event["v"] == 1 and event["rank"] == 0 and isinstance(event["t"], float)
    assert events[0]["event"] == "start" and events[0]["world_size"] == 1
    assert events[-1] == {**events[-1], "event": "end", "reason": "close", "dropped": 0}
    assert events[-1]["events"] == len(events) - 1
    steps = kinds(events, "step")
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4, 100, 101]
    assert all(s["duration_ms"] >= 0 and "error" not in s for s in steps)
    (metric,) = kinds(events, "metric")
    assert metric["loss"] == 0.25 and metric["tokens_per_s"] == 1234 and metric["step"] == 4
    assert metric["note"] == "warmup" and metric["nan"] == "NaN" and metric["inf"] == "-Infinity"
    assert float(metric["nan"]) != float(metric["nan"])  # reads back as NaN


def test_step_duration_is_measured(tmp_path: Path) -> None:
    import time

    probe = Probe(tmp_path)
    with probe.step():
        time.sleep(0.05)
    probe.close()
    (step,) = kinds(read_events(probe.path), "step")
    assert 45 <= step["duration_ms"] < 2000


def test_metric_values_are_converted_in_the_caller(tmp_path: Path) -> None:
    class FakeTensor:  # anything with .item(), like a 0-d tensor or numpy scalar
        def item(self) -> float:
            return 2.5

    import numpy as np

    probe = Probe(tmp_path)
    probe.log(step=7, a=FakeTensor(), b=np.float32(1.5), c=np.int64(3), d=None, flag=True, v=9)
    probe.close()
    (metric,) = kinds(read_events(probe.path), "metric")
    assert metric["step"] == 7 and metric["a"] == 2.5 and metric["b"] == 1.5 and metric["c"] == 3
    assert metric["d"] is None and metric["flag"] is True
    assert metric["v"] == 1  # a metric may not overwrite the envelope's version


def test_failing_step_records_error_and_reraises(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    with pytest.raises(ZeroDivisionError), probe.step():
        1 / 0  # noqa: B018
    probe.close()
    (step,) = kinds(read_events(probe.path), "step")
    assert step["error"] == "ZeroDivisionError"


def test_bad_step_number_falls_back_to_the_counter(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    with probe.step():
        pass
    with probe.step("not a number"):  # type: ignore[arg-type]
        pass
    probe.close()
    assert [s["step"] for s in kinds(read_events(probe.path), "step")] == [0, 1]


def test_custom_event(tmp_path: Path, validator: jsonschema.Draft202012Validator) -> None:
    probe = Probe(tmp_path)
    probe.event("checkpoint", seconds=3.5, path="ckpt/10")
    probe.close()
    (event,) = kinds(read_events(probe.path), "checkpoint")
    assert event["seconds"] == 3.5 and list(validator.iter_errors(event)) == []


def test_appends_to_an_existing_file(tmp_path: Path) -> None:
    for _ in range(2):
        probe = Probe(tmp_path)
        with probe.step():
            pass
        probe.close()
    events = read_events(tmp_path / "probe-rank0.jsonl")
    assert len(kinds(events, "start")) == 2 and len(kinds(events, "end")) == 2


# --- garbage collection --------------------------------------------------------------------------


def test_forced_full_collection_is_recorded(tmp_path: Path) -> None:
    probe = Probe(tmp_path, gc_min_ms=1e9)  # only generation 2 gets events
    gc.disable()  # no automatic collection may free the cycle before the forced one
    try:
        with probe.step():
            cycle: list[Any] = []
            cycle.append(cycle)
            del cycle
            gc.collect(2)
        gc.collect(0)  # too short for gc_min_ms: no event
    finally:
        gc.enable()
    probe.close()
    events = read_events(probe.path)
    gcs = kinds(events, "gc")
    assert [g["generation"] for g in gcs] == [2]
    assert gcs[0]["collected"] >= 1 and gcs[0]["duration_ms"] >= 0
    assert gcs[0]["uncollectable"] == 0
    (step,) = kinds(events, "step")
    assert step["gc_ms"] >= gcs[0]["duration_ms"] - 1e-3  # the pause happened inside the step


def test_young_generations_recorded_with_zero_threshold(tmp_path: Path) -> None:
    probe = Probe(tmp_path, gc_min_ms=0)
    gc.collect(0)
    gc.collect(1)
    probe.close()
    generations = [g["generation"] for g in kinds(read_events(probe.path), "gc")]
    assert 0 in generations and 1 in generations


def test_close_removes_gc_callback_and_is_idempotent(tmp_path: Path) -> None:
    before = list(gc.callbacks)
    probe = Probe(tmp_path)
    assert len(gc.callbacks) == len(before) + 1
    probe.close()
    probe.close()
    assert gc.callbacks == before
    assert probe.closed and not probe.recording
    # Using a closed probe is harmless and records nothing.
    with probe.step():
        pass
    probe.log(loss=1.0)
    probe.flush()
    assert len(kinds(read_events(probe.path), "end")) == 1
    assert kinds(read_events(probe.path), "step") == []


def test_context_manager_closes(tmp_path: Path) -> None:
    with pytest.raises(KeyError), Probe(tmp_path) as probe:
        raise KeyError("x")
    (end,) = kinds(read_events(probe.path), "end")
    assert end["reason"] == "exception" and end["error"] == "KeyError"


def test_record_gc_false_installs_nothing(tmp_path: Path) -> None:
    before = list(gc.callbacks)
    probe = Probe(tmp_path, record_gc=False)
    assert gc.callbacks == before
    gc.collect(2)
    probe.close()
    assert kinds(read_events(probe.path), "gc") == []


# --- never harm the training ---------------------------------------------------------------------


def test_unwritable_folder_warns_once_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    before = list(gc.callbacks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = Probe(blocker / "run")  # a file where the folder should be: fails even as root
        for _ in range(3):
            with probe.step():
                gc.collect(2)
            probe.log(loss=1.0)
        probe.flush()
        probe.close()
    assert [w.category for w in caught] == [ProbeWarning]
    assert "cannot write" in str(caught[0].message)
    assert not probe.recording and gc.callbacks == before
    assert not (blocker / "run").exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores modes")
def test_read_only_folder_warns_once(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.warns(ProbeWarning):
            probe = Probe(folder)
        with probe.step():
            pass
        probe.close()
    finally:
        folder.chmod(0o700)


class FullDisk:
    """A file whose every write fails the way a full disk does."""

    def __init__(self) -> None:
        self.writes = 0
        self.closed = False

    def write(self, data: Any) -> int:
        self.writes += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        self.closed = True


def test_full_disk_warns_once_and_stops_recording(tmp_path: Path) -> None:
    before = list(gc.callbacks)
    probe = Probe(tmp_path, flush_interval=3600)
    full = FullDisk()
    with probe._write_lock:  # swap the file under the writer's lock
        probe._file.close()
        probe._file = full
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            with probe.step():
                pass
            probe.flush()
            probe.log(loss=0.1)
        probe.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, ProbeWarning)]
    assert len(messages) == 1 and "No space left" in messages[0]
    assert full.writes == 1 and full.closed  # one attempt, then no more writes
    assert not probe.recording and gc.callbacks == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_real_enospc_from_dev_full(tmp_path: Path) -> None:
    (tmp_path / "probe-rank0.jsonl").symlink_to("/dev/full")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = Probe(tmp_path, rank=0, flush_interval=3600)
        with probe.step():
            pass
        probe.flush()
        with probe.step():
            pass
        probe.close()
    assert [w.category for w in caught] == [ProbeWarning]
    assert "No space left" in str(caught[0].message)


def test_bounded_buffer_drops_oldest_and_says_so(tmp_path: Path) -> None:
    probe = Probe(tmp_path, max_buffer=16, flush_interval=3600, record_gc=False)
    with probe._write_lock:  # a stalled disk: the writer cannot drain
        for index in range(100):
            probe.log(index=index)
        assert len(probe._buffer) == 16
    probe.close()
    events = read_events(probe.path)
    end = events[-1]
    assert end["event"] == "end"
    # start + 100 metrics offered; the buffer kept the newest 16
    assert end["dropped"] == 101 - 16 and end["events"] == 16
    assert [e["index"] for e in kinds(events, "metric")] == list(range(84, 100))


def test_threads_record_concurrently(tmp_path: Path) -> None:
    probe = Probe(tmp_path, flush_interval=0.01)

    def work() -> None:
        for _ in range(300):
            with probe.step():
                [object() for _ in range(50)]
            probe.log(x=1.0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    probe.close()
    events = read_events(probe.path)
    steps = [e["step"] for e in kinds(events, "step")]
    assert sorted(steps) == list(range(1200))  # no lost or duplicated numbers
    assert len(kinds(events, "metric")) == 1200
    assert events[-1]["dropped"] == 0 and events[-1]["events"] == len(events) - 1


# --- ranks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (0, 1)),
        ({"RANK": "3", "WORLD_SIZE": "8"}, (3, 8)),
        ({"LOCAL_RANK": "2"}, (2, 1)),
        ({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "16"}, (5, 16)),
        ({"RANK": "x", "LOCAL_RANK": "4", "WORLD_SIZE": "0"}, (4, 1)),
        ({"RANK": "-1"}, (0, 1)),
    ],
)
def test_rank_from_environment(env: dict[str, str], expected: tuple[int, int]) -> None:
    assert detect_rank(env) == expected


def test_rank_env_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    probe = Probe(tmp_path)
    probe.close()
    assert probe.path.name == "probe-rank3.jsonl"
    start = read_events(probe.path)[0]
    assert start["rank"] == 3 and start["world_size"] == 4 and start["local_rank"] == 1
    explicit = Probe(tmp_path, rank=7, world_size=9)
    explicit.close()
    assert explicit.path.name == "probe-rank7.jsonl" and explicit.world_size == 9


def test_rank_from_initialised_torch_distributed(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # A subprocess: the process group is global state, and torch's import is kept out of ours.
    result = run_python(
        """
        import socket
        import torch
        import torch.distributed as dist
        from trainwreck.probe import Probe, detect_rank
        sock = socket.socket(); sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]; sock.close()
        print(detect_rank())
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        print(detect_rank())
        Probe("run").close()
        dist.destroy_process_group()
        """,
        tmp_path,
        env={"RANK": "5", "WORLD_SIZE": "6"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["(5, 6)", "(0, 1)"]
    assert (tmp_path / "run" / "probe-rank0.jsonl").exists()


# --- CUDA memory ---------------------------------------------------------------------------------


def fake_torch(initialised: bool) -> types.ModuleType:
    stats = {
        "allocated_bytes.all.current": 1000,
        "reserved_bytes.all.current": 4000,
        "inactive_split_bytes.all.current": 700,
        "num_alloc_retries": 2,
        "num_ooms": 1,
        "segment.all.current": 5,
        "allocated_bytes.all.peak": 9999,
    }
    cuda = types.SimpleNamespace(
        is_initialized=lambda: initialised,
        current_device=lambda: 1,
        memory_stats=lambda device=None: dict(stats),
    )
    module = types.ModuleType("torch")
    module.cuda = cuda  # type: ignore[attr-defined]
    return module


def test_cuda_memory_every_n_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, validator: jsonschema.Draft202012Validator
) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(initialised=True))
    probe = Probe(tmp_path, cuda_every=3)
    for _ in range(7):
        with probe.step():
            pass
    with pytest.raises(MemoryError), probe.step():
        raise MemoryError  # a failing step gets the allocator state regardless of period
    probe.close()
    events = read_events(probe.path)
    memory = kinds(events, "cuda_memory")
    assert [m["step"] for m in memory] == [0, 3, 6, 7]
    assert memory[0] == {
        **memory[0],
        "device": 1,
        "allocated_bytes": 1000,
        "reserved_bytes": 4000,
        "inactive_split_bytes": 700,
        "alloc_retries": 2,
        "ooms": 1,
        "segments": 5,
    }
    assert all(list(validator.iter_errors(m)) == [] for m in memory)


def test_no_cuda_memory_without_initialised_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(initialised=False))
    probe = Probe(tmp_path, cuda_every=1)
    with probe.step():
        pass
    probe.close()
    assert kinds(read_events(probe.path), "cuda_memory") == []


def test_no_cuda_memory_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    probe = Probe(tmp_path, cuda_every=1)
    with probe.step():
        pass
    probe.close()
    assert kinds(read_events(probe.path), "cuda_memory") == []
    assert "torch" not in sys.modules  # the probe did not import it


def test_memory_stats_keys_exist_in_installed_torch() -> None:
    torch = pytest.importorskip("torch")
    doc = torch.cuda.memory_stats.__doc__ or ""
    for key in ("allocated_bytes", "reserved_bytes", "inactive_split_bytes", "segment"):
        assert f'"{key}.{{all,large_pool,small_pool}}.{{current,peak,allocated,freed}}"' in doc
    for key in ("num_alloc_retries", "num_ooms"):
        assert f'"{key}"' in doc


# --- process lifecycle ---------------------------------------------------------------------------


def test_interpreter_exit_closes(tmp_path: Path) -> None:
    result = run_python(
        """
        from trainwreck.probe import Probe
        probe = Probe("run", flush_interval=3600)
        for _ in range(3):
            with probe.step():
                pass
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    events = read_events(tmp_path / "run" / "probe-rank0.jsonl")
    assert len(kinds(events, "step")) == 3
    assert events[-1]["event"] == "end" and events[-1]["reason"] == "exit"


def test_uncaught_exception_closes_with_reason(tmp_path: Path) -> None:
    result = run_python(
        """
        from trainwreck.probe import Probe
        probe = Probe("run", flush_interval=3600)
        with probe.step():
            pass
        with probe.step():
            raise RuntimeError("loss is nan")
        """,
        tmp_path,
    )
    assert result.returncode == 1 and "loss is nan" in result.stderr
    events = read_events(tmp_path / "run" / "probe-rank0.jsonl")
    assert kinds(events, "step")[-1]["error"] == "RuntimeError"
    assert events[-1] == {
        **events[-1],
        "event": "end",
        "reason": "exception",
        "error": "RuntimeError",
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_writes_nothing(tmp_path: Path) -> None:
    result = run_python(
        """
        import gc, os, sys
        from trainwreck.probe import Probe
        probe = Probe("run", gc_min_ms=0)
        with probe.step():
            pass
        pid = os.fork()
        if pid == 0:  # like a DataLoader worker: collects garbage, exits through atexit
            gc.collect(2)
            with probe.step():
                pass
            probe.log(child=1)
            sys.exit(0)
        os.waitpid(pid, 0)
        probe.close()
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    events = read_events(tmp_path / "run" / "probe-rank0.jsonl")
    assert len(kinds(events, "start")) == 1 and len(kinds(events, "end")) == 1
    assert len(kinds(events, "step")) == 1 and kinds(events, "metric") == []
