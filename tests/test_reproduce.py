"""`trainwreck reproduce` on small synthetic notebooks in a temporary repository."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from trainwreck import reproduce as rp
from trainwreck.reproduce import processes, runner

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
psutil = pytest.importorskip("psutil")

MANIFEST_KEYS = {
    "id", "notebook", "device", "status", "cached", "source_hash", "executed", "host",
    "versions", "started", "duration_s", "evidence", "error",
}  # fmt: skip


def make_notebook(root: Path, name: str, cells: list[str], *, parameters: bool = True) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    body = [nbformat.v4.new_markdown_cell(f"# {name}")]
    if parameters:
        body.append(
            nbformat.v4.new_code_cell(
                f'scale = "ci"\nevidence_dir = "build/evidence/{name}"',
                metadata={"tags": ["parameters"]},
            )
        )
    body += [nbformat.v4.new_code_cell(textwrap.dedent(c).strip()) for c in cells]
    nb.cells = body
    path = root / "notebooks" / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def make_entry(root: Path, name: str, reproduction: str) -> Path:
    path = root / "entries" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"id: {name}\ntitle: {name}\nreproduction:\n{textwrap.indent(reproduction, '  ')}\n"
    )
    return path


def by_id(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in manifest["notebooks"]}


EVIDENCE_CELL = """
    import os, pathlib
    ev = pathlib.Path(evidence_dir)
    for run in ("broken", "fixed"):
        (ev / run).mkdir(parents=True, exist_ok=True)
        (ev / run / "rank0.log").write_text(f"{run} step 1/1 | loss 1.0\\n")
    (ev / "metrics.json").write_text('{"x": 1}')
    (ev / "plot.png").write_bytes(b"png")
    (ev / "seen.json").write_text(__import__("json").dumps({"scale": scale, "evidence_dir": evidence_dir, "cwd": os.getcwd()}))
"""


def test_passing_notebook_manifest_and_parameters(tmp_path: Path) -> None:
    make_notebook(tmp_path, "ok", [EVIDENCE_CELL])
    manifest = rp.reproduce(tmp_path, scale="full")
    assert manifest["version"] == 1 and manifest["toolkit_version"]
    record = by_id(manifest)["ok"]
    assert set(record) == MANIFEST_KEYS
    assert record["status"] == "passed" and record["cached"] is False and record["error"] is None
    assert record["executed"] == "build/executed/ok.ipynb"
    assert record["evidence"] == {
        "dir": "build/evidence/ok",
        "logs": {"broken": ["build/evidence/ok/broken/rank0.log"], "fixed": ["build/evidence/ok/fixed/rank0.log"]},
        "metrics": "build/evidence/ok/metrics.json",
        "figures": ["build/evidence/ok/plot.png"],
    }  # fmt: skip
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["host"]["cpu"]
    # The runner's parameters override the notebook's, and the kernel runs in the repo root.
    seen = json.loads((tmp_path / "build/evidence/ok/seen.json").read_text())
    assert seen == {"scale": "full", "evidence_dir": "build/evidence/ok", "cwd": str(tmp_path)}
    executed = json.loads((tmp_path / record["executed"]).read_text())
    injected = executed["cells"][2]
    assert injected["metadata"]["tags"] == ["injected-parameters"]
    assert executed["metadata"]["trainwreck"]["provenance"]["source_hash"] == record["source_hash"]
    on_disk = json.loads((tmp_path / "build/manifest.json").read_text())
    assert on_disk["notebooks"] == manifest["notebooks"]


def test_failure_reports_notebook_cell_and_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_notebook(
        tmp_path,
        "bad",
        [
            "stall_ms = 12.5",
            "# measure the stall\nfor step in range(30):\n    print(f'step {step}')\n"
            "assert stall_ms > 100, f'stall only {stall_ms} ms'",
            "print('never reached')",
        ],
    )
    args = argparse.Namespace(root=str(tmp_path), ids=["bad"], force=False, jobs=1, scale="ci",
                              cell_timeout=60.0, timeout=120.0)  # fmt: skip
    assert rp.run(args) == 1
    err = capsys.readouterr().err
    assert "FAILED bad (notebooks/bad.ipynb), cell 3:" in err
    assert "# measure the stall" in err
    assert "AssertionError: stall only 12.5 ms" in err
    assert "Traceback" not in err
    # the last lines the failed cell printed come with the failure, not the first ones
    assert "    > step 29" in err and "    > step 18" in err and "step 17" not in err
    record = by_id(json.loads((tmp_path / "build/manifest.json").read_text()))["bad"]
    assert record["status"] == "failed"
    assert record["error"]["cell"] == 3
    assert record["error"]["source"].startswith("# measure the stall")
    assert record["error"]["message"] == "AssertionError: stall only 12.5 ms"
    assert not (tmp_path / "build/cache").exists() or not any((tmp_path / "build/cache").iterdir())


def test_cache_serves_unchanged_notebook(tmp_path: Path) -> None:
    path = make_notebook(tmp_path, "slow", [EVIDENCE_CELL, "import time\ntime.sleep(3)"])
    t0 = time.monotonic()
    first = by_id(rp.reproduce(tmp_path))["slow"]
    first_s = time.monotonic() - t0
    assert first["status"] == "passed" and not first["cached"]

    (tmp_path / "build/evidence/slow/metrics.json").unlink()  # restored from the cache
    t0 = time.monotonic()
    second = by_id(rp.reproduce(tmp_path))["slow"]
    second_s = time.monotonic() - t0
    assert second["cached"] is True and second["status"] == "passed"
    assert second["source_hash"] == first["source_hash"]
    assert second_s < first_s / 3, (first_s, second_s)
    assert (tmp_path / "build/evidence/slow/metrics.json").is_file()

    # --force re-runs; a changed code cell changes the hash and re-runs.
    assert by_id(rp.reproduce(tmp_path, force=True))["slow"]["cached"] is False
    nb = nbformat.read(path, as_version=4)
    nb.cells[-1].source = "import time\ntime.sleep(0.1)"
    nbformat.write(nb, path)
    third = by_id(rp.reproduce(tmp_path))["slow"]
    assert third["cached"] is False and third["source_hash"] != first["source_hash"]
    # Markdown edits do not change the hash.
    nb.cells[0].source = "# slow, now documented"
    nbformat.write(nb, path)
    assert by_id(rp.reproduce(tmp_path))["slow"]["cached"] is True
    # ... and the executed copy served from the cache shows the current prose with its outputs.
    served = nbformat.read(tmp_path / "build/executed/slow.ipynb", as_version=4)
    assert served.cells[0].source == "# slow, now documented"
    assert served.cells[2].metadata["tags"] == ["injected-parameters"]
    assert [c.cell_type for c in served.cells] == ["markdown", "code", "code", "code", "code"]


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_timeout_kills_kernel_and_children(tmp_path: Path) -> None:
    make_notebook(
        tmp_path,
        "hang",
        [
            """
            import os, pathlib, subprocess, sys
            pathlib.Path(evidence_dir).mkdir(parents=True, exist_ok=True)
            # one child in the kernel's process group, one that starts its own session
            a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
            pathlib.Path(evidence_dir, "pids").write_text(f"{os.getpid()} {a.pid} {b.pid}")
            """,
            "import time\nwhile True:\n    time.sleep(1)",
        ],
    )
    t0 = time.monotonic()
    record = by_id(rp.reproduce(tmp_path, cell_timeout=4))["hang"]
    assert time.monotonic() - t0 < 60
    assert record["status"] == "failed"
    assert record["error"]["cell"] == 3
    assert "timed out after 4 s" in record["error"]["message"]
    pids = [int(p) for p in (tmp_path / "build/evidence/hang/pids").read_text().split()]
    deadline = time.monotonic() + 10
    while not all(_dead(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(_dead(pid) for pid in pids), [p for p in pids if not _dead(p)]


def test_notebook_timeout(tmp_path: Path) -> None:
    make_notebook(
        tmp_path, "long", ["import time\ntime.sleep(2)"] * 2 + ["import time\ntime.sleep(600)"]
    )
    t0 = time.monotonic()
    record = by_id(rp.reproduce(tmp_path, cell_timeout=60, timeout=8))["long"]
    assert time.monotonic() - t0 < 30  # the busy kernel was killed, not waited for
    assert record["status"] == "failed"
    assert "notebook exceeded its 8 s limit" in record["error"]["message"]


def test_parallel_jobs(tmp_path: Path) -> None:
    for name in ("p1", "p2", "p3"):
        make_notebook(tmp_path, name, [EVIDENCE_CELL])
    lines: list[str] = []
    events: list = []
    manifest = rp.reproduce(tmp_path, jobs=2, progress=lines.append, events=events.append)
    assert [r["status"] for r in manifest["notebooks"]] == ["passed"] * 3
    assert any("p1: cell" in line for line in lines)  # progress names notebook and cell
    # each notebook's start and end, for the build's one progress line
    assert sorted((e.id, e.status) for e in events) == sorted(
        [(name, status) for name in ("p1", "p2", "p3") for status in ("running", "passed")]
    )
    ended = [e for e in events if e.status == "passed"]
    assert all(e.seconds is not None and e.seconds > 0 for e in ended)
    again: list = []
    rp.reproduce(tmp_path, jobs=2, events=again.append)
    assert sorted((e.id, e.status) for e in again) == [(n, "cached") for n in ("p1", "p2", "p3")]


def _gpu_repo(tmp_path: Path) -> Path:
    make_notebook(tmp_path, "gpu-thing", ["import torch\nassert torch.cuda.is_available()"])
    make_entry(tmp_path, "gpu-thing", "notebook: notebooks/gpu-thing.ipynb\ndevice: gpu")
    make_entry(tmp_path, "hardware", "not_reproducible: a failing NIC")
    return tmp_path


def _record_gpu(root: Path, digest: str) -> None:
    nb = nbformat.read(root / "notebooks/gpu-thing.ipynb", as_version=4)
    nb.metadata["trainwreck"] = {
        "provenance": {
            "source_hash": digest, "scale": "ci", "host": "x", "gpu": "NVIDIA H200",
            "driver": "570.1", "versions": {"python": "3.11", "torch": "2.13", "cuda": "12.8"},
            "date": "2026-11-30T00:00:00+00:00", "duration_s": 60.0,
        }
    }  # fmt: skip
    (root / "recordings").mkdir(exist_ok=True)
    nbformat.write(nb, root / "recordings/gpu-thing.ipynb")


def test_gpu_notebook_skipped_recorded_or_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainwreck.model import load_entry

    root = _gpu_repo(tmp_path)
    monkeypatch.setattr(runner, "cuda_available", lambda *a, **k: False)
    first = rp.reproduce(root)
    records = by_id(first)
    assert records["gpu-thing"]["status"] == "skipped-needs-gpu"
    assert records["gpu-thing"]["executed"] is None
    assert records["hardware"]["status"] == "not-reproducible"
    # Neither started, so neither has a start time, and skipping them again writes the same
    # records (the pages' key is over them: a no-op build must not regenerate every page).
    assert records["gpu-thing"]["started"] is None and records["hardware"]["started"] is None
    assert rp.reproduce(root)["notebooks"] == first["notebooks"]

    entry = load_entry(root / "entries/gpu-thing.yaml", root)
    notebook = json.loads((root / "notebooks/gpu-thing.ipynb").read_text())
    _record_gpu(root, rp.source_hash(notebook, entry.reproduction))
    record = by_id(rp.reproduce(root))["gpu-thing"]
    assert record["status"] == "recorded-gpu"
    assert record["host"]["gpu"] == "NVIDIA H200" and record["versions"]["cuda"] == "12.8"
    assert record["executed"] == "build/executed/gpu-thing.ipynb"
    assert rp.notebook_problems(entry, root) == []

    _record_gpu(root, "0" * 64)  # recorded for another version of the notebook
    record = by_id(rp.reproduce(root))["gpu-thing"]
    assert record["status"] == "stale" and record["executed"] is None
    problems = rp.notebook_problems(entry, root)
    assert len(problems) == 1
    assert str(problems[0]).startswith("recordings/gpu-thing.ipynb:1:1: ")
    assert "stale GPU recording" in problems[0].message


def test_notebook_problems(tmp_path: Path) -> None:
    from trainwreck.model import load_entry

    make_entry(tmp_path, "missing", "notebook: notebooks/missing.ipynb\ndevice: cpu")
    make_entry(tmp_path, "untagged", "notebook: notebooks/untagged.ipynb\ndevice: cpu")
    make_entry(tmp_path, "broken-json", "notebook: notebooks/broken-json.ipynb\ndevice: cpu")
    make_entry(tmp_path, "hardware", "not_reproducible: a failing NIC")
    make_notebook(tmp_path, "untagged", ["scale = 'ci'\nx = 1"], parameters=False)
    (tmp_path / "notebooks/broken-json.ipynb").write_text(
        '{"cells": [\n  {"cell_type": "code",,}\n'
    )

    def problems(name: str) -> list[str]:
        return [
            str(p)
            for p in rp.notebook_problems(
                load_entry(tmp_path / f"entries/{name}.yaml", tmp_path), tmp_path
            )
        ]

    assert problems("hardware") == []
    (missing,) = problems("missing")
    assert missing.startswith("entries/missing.yaml:4:")
    assert "notebooks/missing.ipynb does not exist" in missing
    untagged = problems("untagged")
    assert any("tagged 'parameters'" in p for p in untagged), untagged
    assert any("does not define evidence_dir" in p for p in untagged), untagged
    assert all(p.startswith("notebooks/untagged.ipynb:") for p in untagged)
    (bad,) = problems("broken-json")
    assert bad.startswith("notebooks/broken-json.ipynb:2:") and "not valid JSON" in bad


def test_unknown_id_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_notebook(tmp_path, "ok", ["x = 1"])
    args = argparse.Namespace(root=str(tmp_path), ids=["nope"], force=False, jobs=1, scale="ci",
                              cell_timeout=60.0, timeout=120.0)  # fmt: skip
    assert rp.run(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trainwreck: unknown id 'nope'") and "\n" not in err


def test_core_import_does_not_pull_jupyter_or_torch() -> None:
    code = (
        "import sys, trainwreck.reproduce\n"
        "bad = [m for m in ('nbclient', 'nbformat', 'jupyter_client', 'torch', 'matplotlib') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_interrupt_kills_kernel_and_children(tmp_path: Path) -> None:
    make_notebook(
        tmp_path,
        "hang",
        [
            """
            import os, pathlib, subprocess, sys
            pathlib.Path(evidence_dir).mkdir(parents=True, exist_ok=True)
            a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            pathlib.Path(evidence_dir, "pids").write_text(f"{os.getpid()} {a.pid}")
            """,
            "import time\ntime.sleep(600)",
        ],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwreck", "reproduce", "--root", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "hang: cell 3" in line:
                break
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "trainwreck: interrupted" in err and "Traceback" not in err
    pids = [int(p) for p in (tmp_path / "build/evidence/hang/pids").read_text().split()]
    deadline = time.monotonic() + 10
    while not all(_dead(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(_dead(pid) for pid in pids), [p for p in pids if not _dead(p)]


def test_record_then_serve_recording_without_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A "GPU" notebook that does not really need one, so the recording path runs here.
    make_notebook(tmp_path, "gpu-thing", [EVIDENCE_CELL])
    make_entry(tmp_path, "gpu-thing", "notebook: notebooks/gpu-thing.ipynb\ndevice: gpu")
    monkeypatch.setattr(runner, "cuda_available", lambda *a, **k: True)
    ran = by_id(rp.reproduce(tmp_path, record=True))["gpu-thing"]
    assert ran["status"] == "passed"
    assert (tmp_path / "recordings/gpu-thing.ipynb").is_file()
    assert (tmp_path / "recordings/gpu-thing/broken/rank0.log").is_file()

    monkeypatch.setattr(runner, "cuda_available", lambda *a, **k: False)
    shown = by_id(rp.reproduce(tmp_path))["gpu-thing"]
    assert shown["status"] == "recorded-gpu"
    assert shown["source_hash"] == ran["source_hash"]
    assert shown["evidence"]["logs"]["broken"] == ["recordings/gpu-thing/broken/rank0.log"]


# A daemon the way servers start one: fork, new session, fork again; the grandchild is re-parented
# away from the kernel's tree and process group, and holds a listening port.
DAEMON_CELL = """
    import os, pathlib, subprocess, sys
    pathlib.Path(evidence_dir).mkdir(parents=True, exist_ok=True)
    daemon = (
        "import os, socket, sys, time\\n"
        "os.setsid()\\n"
        "if os.fork():\\n"
        "    os._exit(0)\\n"
        "server = socket.socket()\\n"
        "server.bind(('127.0.0.1', 0))\\n"
        "server.listen()\\n"
        "open(sys.argv[1], 'w').write(f'{os.getpid()} {server.getsockname()[1]}')\\n"
        "time.sleep(600)\\n"
    )
    for name, env in (("kept", None), ("cleared", {"PATH": os.environ.get("PATH", "")})):
        out = pathlib.Path(evidence_dir, name)
        subprocess.run([sys.executable, "-c", daemon, str(out)], env=env, check=True)
        for _ in range(100):
            if out.exists() and out.read_text():
                break
            __import__("time").sleep(0.1)
"""


def _daemons(root: Path, name: str) -> list[tuple[int, int]]:
    found = []
    for which in ("kept", "cleared"):
        pid, port = (root / "build/evidence" / name / which).read_text().split()
        found.append((int(pid), int(port)))
    return found


def _wait_dead(pids: list[int], seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(_dead(pid) for pid in pids):
        time.sleep(0.2)
    return [pid for pid in pids if not _dead(pid)]


@pytest.mark.parametrize("ending", ["passes", "times-out"])
def test_double_forked_daemons_are_killed(tmp_path: Path, ending: str) -> None:
    cells = [DAEMON_CELL] + (
        ["import time\nwhile True:\n    time.sleep(1)"] if ending == "times-out" else []
    )
    make_notebook(tmp_path, "daemon", cells)
    record = by_id(rp.reproduce(tmp_path, cell_timeout=10))["daemon"]
    assert record["status"] == ("passed" if ending == "passes" else "failed"), record["error"]
    daemons = _daemons(tmp_path, "daemon")
    assert _wait_dead([pid for pid, _ in daemons]) == []
    for _, port in daemons:  # the port is free again
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_reaping_restores_the_sub_reaper_setting() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_CHILD_SUBREAPER is Linux only")
    assert processes._child_subreaper(False) is not None  # supported here; now off
    with processes.reaping():
        assert processes._child_subreaper(True) is True  # was on inside
    assert processes._child_subreaper(False) is False  # and off again after


def test_no_gpu_device_node_means_no_cuda_without_asking_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainwreck.reproduce import host

    def no_subprocess(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("torch was asked although no GPU device node exists")

    monkeypatch.setattr(host.sys, "platform", "linux")
    monkeypatch.setattr(host.os.path, "exists", lambda _p: False)
    monkeypatch.setattr(host.subprocess, "run", no_subprocess)
    assert host.cuda_available() is False

    asked: list[list[str]] = []

    def answer(args: list[str], **_k: Any) -> Any:
        asked.append(args)
        return subprocess.CompletedProcess(args, 0)

    monkeypatch.setattr(host.os.path, "exists", lambda p: p == "/dev/nvidiactl")
    monkeypatch.setattr(host.subprocess, "run", answer)
    assert host.cuda_available() is True and len(asked) == 1
