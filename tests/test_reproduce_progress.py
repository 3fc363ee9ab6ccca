"""The build's one progress line: done/total, what runs, elapsed and the estimate from the last
manifest's durations; the runner's per-cell lines go to the log; failures are printed whole."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from trainwreck.engine.parallel import usable_cpus
from trainwreck.reproduce.command import jobs_value
from trainwreck.reproduce.progress import NotebookEvent, ProgressLine, previous_durations
from trainwreck.reproduce.targets import discover
from trainwreck.site.command import TerminalLines

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_line_counts_estimates_and_keeps_cells_in_the_log() -> None:
    clock, shown, log = Clock(), [], io.StringIO()
    line = ProgressLine(
        ["a", "b", "c", "d"], {"a": 100.0, "b": 300.0, "c": 200.0}, 2, log, shown.append,
        clock=clock,
    )  # fmt: skip
    line.detail("a: cell 1 (1/5 code cells, 0.1 s)")
    line.event(NotebookEvent("a", "running"))
    assert shown == []  # a start is not a line of its own
    clock.now += 90
    line.event(NotebookEvent("a", "passed", 90.0))
    # left: b 300 + c 200 + d (no duration: the median, 200) = 700 s over 2 jobs
    assert shown == ["1/4 notebooks, 1m30s elapsed, about 5m50s left"]
    line.event(NotebookEvent("b", "running"))
    clock.now += 100
    line.event(NotebookEvent("c", "cached", 0.0))
    assert len(shown) == 1  # served from the cache: no line of its own
    clock.now += 20
    line.event(NotebookEvent("d", "running"))
    line.event(NotebookEvent("d", "passed", 10.0))
    assert shown[-1] == (
        "3/4 notebooks (1 from the cache), 3m30s elapsed, about 1m30s left; running b"
    )
    line.event(NotebookEvent("b", "failed", 120.0, "cell 3: AssertionError: no stall"))
    assert shown[-2] == "FAILED b: cell 3: AssertionError: no stall"
    assert "a: cell 1 (1/5 code cells, 0.1 s)" in log.getvalue().splitlines()
    assert not any("cell 1" in s for s in shown)


def test_no_estimate_without_a_previous_run() -> None:
    shown: list[str] = []
    line = ProgressLine(["a", "b"], {}, 1, io.StringIO(), shown.append, clock=Clock())
    line.event(NotebookEvent("a", "passed", 5.0))
    assert shown == ["1/2 notebooks, 0s elapsed"]


def test_previous_durations_read_the_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "notebooks": [
                    {"id": "a", "duration_s": 67.3},
                    {"id": "b", "duration_s": None},
                    {"id": "c"},
                    "junk",
                ]
            }
        )
    )
    assert previous_durations(manifest) == {"a": 67.3}
    assert previous_durations(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("{")
    assert previous_durations(tmp_path / "bad.json") == {}


def test_jobs_auto_is_the_usable_cpus() -> None:
    assert jobs_value("auto") == usable_cpus()
    assert jobs_value("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        jobs_value("many")


def test_build_shows_the_line_and_logs_the_cells(tmp_path: Path) -> None:
    """The build's reproduce step: one line per notebook with the estimate, the cells in
    build/logs/reproduce.log (here with a stand-in for the runner)."""
    from trainwreck.site.pipeline import _Steps, _with_progress_line

    (tmp_path / "notebooks").mkdir()
    for name in ("n1", "n2"):
        (tmp_path / "notebooks" / f"{name}.ipynb").write_text('{"cells": [], "metadata": {}}')
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "manifest.json").write_text(
        json.dumps({"notebooks": [{"id": "n1", "duration_s": 60}, {"id": "n2", "duration_s": 120}]})
    )

    def fake_reproduce(root, ids, *, jobs, progress, events):
        for name in ("n1", "n2"):
            events(NotebookEvent(name, "running"))
            progress(f"{name}: cell 1 (1/1 code cells, 0.1 s)")
            events(NotebookEvent(name, "passed", 1.0))
        return {"notebooks": []}

    said: list[str] = []
    steps = _Steps(tmp_path, said.append, 0.0)
    assert _with_progress_line(steps, 1, fake_reproduce) == {"notebooks": []}
    assert said[0] == (
        "  2 notebooks; each cell's output: build/logs/reproduce.log; "
        "3 min of notebook time by the last run's durations"
    )
    assert said[1].startswith("  1/2 notebooks, ") and said[1].endswith(", about 2m00s left")
    assert said[2].startswith("  2/2 notebooks, ")
    log = (tmp_path / "build" / "logs" / "reproduce.log").read_text()
    assert "n2: cell 1 (1/1 code cells, 0.1 s)" in log


def test_the_readme_and_the_repro_extra_cover_the_first_hour() -> None:
    """Every entry page says `jupyter lab notebooks/<id>.ipynb`: the repro extra installs it;
    the README says what the first build costs and the quick way to a browsable site."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(dep.startswith("jupyterlab") for dep in extras["repro"])
    readme = (root / "README.md").read_text()
    assert "trainwreck build -j auto" in readme and "23 min 35 s" in readme
    assert "trainwreck build --no-reproduce" in readme and "build/logs/reproduce.log" in readme


def test_a_build_with_nothing_to_run_says_one_line() -> None:
    shown: list[str] = []
    line = ProgressLine(["a", "b", "c"], {"a": 60.0}, 2, io.StringIO(), shown.append, clock=Clock())
    for notebook_id, status in (("a", "cached"), ("b", "skipped-needs-gpu"), ("c", "cached")):
        line.event(NotebookEvent(notebook_id, status))
    assert shown == ["3/3 notebooks (2 from the cache), 0s elapsed"]


def test_a_fresh_clone_estimates_from_the_committed_durations(tmp_path: Path) -> None:
    committed = tmp_path / "durations.json"
    committed.write_text(json.dumps({"durations_s": {"a": 30.0, "b": 45.5, "c": "x"}}))
    manifest = tmp_path / "manifest.json"
    assert previous_durations(manifest, committed) == {"a": 30.0, "b": 45.5}
    manifest.write_text(json.dumps({"notebooks": [{"id": "a", "duration_s": 12.0}]}))
    assert previous_durations(manifest, committed) == {"a": 12.0, "b": 45.5}  # the last run wins


def test_the_committed_durations_name_only_notebooks_that_exist() -> None:
    data = json.loads((ROOT / "notebooks" / "durations.json").read_text(encoding="utf-8"))
    known = {t.id for t in discover(ROOT) if t.device == "cpu"}
    timed = set(data["durations_s"])
    assert timed <= known, f"durations.json names notebooks that are gone: {timed - known}"
    # (a new notebook without a duration is estimated at the median; most must be timed)
    assert len(timed) >= 0.8 * len(known)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_is_rewritten_in_place_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    screen = FakeTerminal()
    say = TerminalLines(screen)
    assert say.in_place
    say("[2/5] reproduce")
    say("\r  1/2 notebooks, 3s elapsed")
    say("\r  2/2 notebooks, 9s elapsed")
    say("  notebooks done (9.0 s)")
    assert screen.getvalue() == (
        "[2/5] reproduce\n\r\x1b[K  1/2 notebooks, 3s elapsed\r\x1b[K  2/2 notebooks, 9s elapsed"
        "\n  notebooks done (9.0 s)\n"
    )
    log = io.StringIO()  # not a terminal: every line stands on its own
    say = TerminalLines(log)
    say("\r  1/2 notebooks, 3s elapsed")
    say("done")
    assert log.getvalue() == "  1/2 notebooks, 3s elapsed\ndone\n"
