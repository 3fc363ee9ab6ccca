"""Entries with more than one reproduction (`reproduction` as a list): the schema, check's
problems at their line, reproduce's targets and runs, and each reproduction's own status."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.browser.fixture_repo import fake_run, make_repo, notebook, png_bytes
from trainwreck import reproduce as rp
from trainwreck import site
from trainwreck.check import check_entries
from trainwreck.model import Entry, load_entry
from trainwreck.reproduce import runner
from trainwreck.reproduce.records import RunRecord
from trainwreck.site.reproduction import render_reproduction
from trainwreck.site.status import entry_status, reproduction_status, reproduction_statuses

REPO = Path(__file__).resolve().parents[1]
BASE = (REPO / "tests/check_cases/base-entry.yaml").read_text(encoding="utf-8")
BASE_REPRODUCTION = "reproduction:\n  not_reproducible: It is a test fixture, not a failure.\n"

GPU_AND_REPLAY = """\
reproduction:
- notebook: notebooks/base-entry.ipynb
  device: gpu
  note: The real run.
- notebook: notebooks/base-entry-replay.ipynb
  device: cpu
  replay: allocator
  note: The replay.
"""


def _notebook_json(name: str, code: str = "x = 1") -> str:
    """A minimal valid notebook: a parameters cell and one code cell."""
    cells = [
        {
            "cell_type": "code",
            "id": "p",
            "metadata": {"tags": ["parameters"]},
            "source": f'scale = "ci"\nevidence_dir = "build/evidence/{name}"',
            "execution_count": None,
            "outputs": [],
        },
        {
            "cell_type": "code",
            "id": "c",
            "metadata": {},
            "source": code,
            "execution_count": None,
            "outputs": [],
        },
    ]
    data = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(data, indent=1)


def _repo(tmp_path: Path, reproduction: str, notebooks: tuple[str, ...] = ()) -> Path:
    """Schemas, base-entry.yaml with `reproduction` in place of its own, and the notebooks."""
    shutil.copytree(REPO / "schemas", tmp_path / "schemas")
    (tmp_path / "entries").mkdir()
    assert BASE_REPRODUCTION in BASE
    (tmp_path / "entries/base-entry.yaml").write_text(BASE.replace(BASE_REPRODUCTION, reproduction))
    (tmp_path / "notebooks").mkdir()
    for name in notebooks:
        (tmp_path / f"notebooks/{name}.ipynb").write_text(_notebook_json(name))
    return tmp_path


def _line_of(root: Path, text: str, occurrence: int = 1) -> int:
    """The line of the `occurrence`-th line of base-entry.yaml that starts with `text`."""
    lines = (root / "entries/base-entry.yaml").read_text().splitlines()
    found = [n for n, line in enumerate(lines, 1) if line.startswith(text)]
    return found[occurrence - 1]


def _problems(root: Path) -> list[str]:
    problems, checked = check_entries(root, sorted((root / "entries").glob("*.yaml")))
    assert checked == len(list((root / "entries").glob("*.yaml")))
    return [str(p) for p in problems]


# --- schema and check ----------------------------------------------------------------------------


def test_list_form_is_valid_and_typed(tmp_path: Path) -> None:
    root = _repo(tmp_path, GPU_AND_REPLAY, ("base-entry", "base-entry-replay"))
    assert _problems(root) == []
    entry = load_entry(root / "entries/base-entry.yaml", root)
    gpu, replay = entry.reproductions
    assert (gpu.id, gpu.device, gpu.replay, gpu.path) == (
        "base-entry",
        "gpu",
        None,
        ("reproduction", 0),
    )
    assert (replay.id, replay.device, replay.replay) == ("base-entry-replay", "cpu", "allocator")
    assert replay.entry == "base-entry" and replay.note == "The replay."
    assert entry.reproduction == gpu.data  # the first one, for code that reads one block


def test_single_form_stays_one_reproduction_named_by_the_entry(tmp_path: Path) -> None:
    single = "reproduction:\n  notebook: notebooks/other-name.ipynb\n  device: cpu\n"
    root = _repo(tmp_path, single, ("other-name",))
    assert _problems(root) == []
    (only,) = load_entry(root / "entries/base-entry.yaml", root).reproductions
    assert only.single and only.id == "base-entry" and only.path == ("reproduction",)


def test_two_reproductions_on_one_device_is_an_error_at_the_second(tmp_path: Path) -> None:
    two_gpu = GPU_AND_REPLAY.replace("  device: cpu\n", "  device: gpu\n")
    root = _repo(tmp_path, two_gpu, ("base-entry", "base-entry-replay"))
    (problem,) = _problems(root)
    line = _line_of(root, "- notebook: notebooks/base-entry-replay.ipynb")
    assert problem.startswith(f"entries/base-entry.yaml:{line}:3: reproduction[1]: ")
    assert "a second reproduction with device gpu (the first is reproduction[0])" in problem


def test_the_same_notebook_twice_is_an_id_error(tmp_path: Path) -> None:
    twice = GPU_AND_REPLAY.replace("base-entry-replay.ipynb", "base-entry.ipynb")
    root = _repo(tmp_path, twice, ("base-entry",))
    (problem,) = _problems(root)
    line = _line_of(root, "- notebook: notebooks/base-entry.ipynb", 2)
    assert problem.startswith(f"entries/base-entry.yaml:{line}:3: reproduction[1]: ")
    assert "reproduction id 'base-entry' is also reproduction[0]'s" in problem


def test_each_notebook_of_the_list_must_exist(tmp_path: Path) -> None:
    root = _repo(tmp_path, GPU_AND_REPLAY, ("base-entry",))
    (problem,) = _problems(root)
    line = _line_of(root, "- notebook: notebooks/base-entry-replay.ipynb")
    assert problem.startswith(f"entries/base-entry.yaml:{line}:13: reproduction[1].notebook: ")
    assert "notebooks/base-entry-replay.ipynb does not exist" in problem


def test_each_notebook_of_the_list_is_checked(tmp_path: Path) -> None:
    root = _repo(tmp_path, GPU_AND_REPLAY, ("base-entry",))
    (root / "notebooks/base-entry-replay.ipynb").write_text('{"cells": [\n  {,}\n')
    (problem,) = _problems(root)
    assert (
        problem.startswith("notebooks/base-entry-replay.ipynb:2:") and "not valid JSON" in problem
    )


@pytest.mark.parametrize(
    ("reproduction", "at", "fragment"),
    [
        (GPU_AND_REPLAY.replace("device: cpu", "device: tpu"), "  device: tpu",
         "reproduction[1].device: 'tpu' is not one of ['cpu', 'gpu']"),
        (GPU_AND_REPLAY.replace("replay: allocator", "replay: gpu"), "  replay: gpu",
         "reproduction[1].replay: 'gpu' is not one of ['allocator']"),
        ("reproduction: []\n", "reproduction: []", "reproduction: "),
    ],
)  # fmt: skip
def test_schema_errors_in_the_list_are_at_their_line(
    tmp_path: Path, reproduction: str, at: str, fragment: str
) -> None:
    root = _repo(tmp_path, reproduction, ("base-entry", "base-entry-replay"))
    problems = _problems(root)
    line = _line_of(root, at)
    assert any(
        p.startswith(f"entries/base-entry.yaml:{line}:") and fragment in p for p in problems
    ), problems


def test_a_reproduction_id_two_entries_share_is_an_error(tmp_path: Path) -> None:
    root = _repo(tmp_path, GPU_AND_REPLAY, ("base-entry", "base-entry-replay"))
    other = BASE.replace("id: base-entry", "id: other-entry").replace(
        BASE_REPRODUCTION,
        "reproduction:\n- notebook: notebooks/base-entry-replay.ipynb\n  device: cpu\n",
    )
    (root / "entries/other-entry.yaml").write_text(other)
    problems = [p for p in _problems(root) if p.startswith("entries/other-entry.yaml")]
    assert len(problems) == 1, problems
    assert "reproduction id 'base-entry-replay' is also entry 'base-entry''s" in problems[0]


def test_the_repository_entry_lists_its_gpu_notebook_and_its_replay() -> None:
    entry = load_entry(REPO / "entries/cuda-allocator-fragmentation.yaml", REPO)
    gpu, replay = entry.reproductions
    # The GPU notebook keeps the entry's id: its recordings/ name and source hash stay.
    assert (gpu.id, gpu.device, gpu.replay) == ("cuda-allocator-fragmentation", "gpu", None)
    assert (replay.id, replay.device, replay.replay) == (
        "cuda-allocator-fragmentation-replay",
        "cpu",
        "allocator",
    )
    assert (REPO / str(replay.notebook)).is_file()


# --- reproduce -----------------------------------------------------------------------------------


def test_targets_each_reproduction_and_an_entry_id_names_them_all(tmp_path: Path) -> None:
    root = _repo(tmp_path, GPU_AND_REPLAY, ("base-entry", "base-entry-replay"))
    targets = {t.id: t for t in rp.discover(root)}
    assert set(targets) == {"base-entry", "base-entry-replay"}  # the replay is no orphan
    assert targets["base-entry"].device == "gpu"
    assert targets["base-entry-replay"].device == "cpu"
    assert {t.entry_id for t in targets.values()} == {"base-entry"}
    assert [t.id for t in rp.discover(root, ["base-entry"])] == ["base-entry", "base-entry-replay"]
    assert [t.id for t in rp.discover(root, ["base-entry-replay"])] == ["base-entry-replay"]
    with pytest.raises(rp.ReproduceError, match="unknown id 'nope'"):
        rp.discover(root, ["nope"])


def test_a_cpu_run_runs_the_cpu_notebook_and_accounts_for_the_gpu_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("nbclient")
    root = _repo(tmp_path, GPU_AND_REPLAY, ("base-entry",))
    evidence = (
        "import pathlib\nev = pathlib.Path(evidence_dir)\nev.mkdir(parents=True, exist_ok=True)\n"
        "(ev / 'metrics.json').write_text('{\"replayed\": 1}')"
    )
    (root / "notebooks/base-entry-replay.ipynb").write_text(
        _notebook_json("base-entry-replay", evidence)
    )
    monkeypatch.setattr(runner, "cuda_available", lambda *a, **k: False)
    records = {r["id"]: r for r in rp.reproduce(root, ["base-entry"])["notebooks"]}
    assert set(records) == {"base-entry", "base-entry-replay"}
    gpu, cpu = records["base-entry"], records["base-entry-replay"]
    assert gpu["status"] == "skipped-needs-gpu" and gpu["executed"] is None
    assert cpu["status"] == "passed", cpu["error"]
    assert cpu["executed"] == "build/executed/base-entry-replay.ipynb"
    assert cpu["evidence"]["metrics"] == "build/evidence/base-entry-replay/metrics.json"
    assert (root / "build/cache" / cpu["source_hash"]).is_dir()  # its own cache entry
    assert gpu["source_hash"] != cpu["source_hash"]
    again = {r["id"]: r for r in rp.reproduce(root, ["base-entry-replay"])["notebooks"]}
    assert again["base-entry-replay"]["cached"]
    assert again["base-entry"] == gpu  # still current: kept in the manifest


# --- status and page ------------------------------------------------------------------------------

RECORD: dict[str, Any] = {
    "notebook": "notebooks/n.ipynb",
    "source_hash": "abc",
    "host": {"cpu": "Demo CPU 9000", "gpu": None, "driver": None},
    "versions": {"python": "3.11.2", "torch": None, "cuda": None},
    "started": "2026-11-30T01:02:03+00:00",
}


def _entry(reproduction: Any) -> Entry:
    data = {"id": "demo", "title": "Demo", "reproduction": reproduction, "related": []}
    return Entry("demo", Path("entries/demo.yaml"), data, None)  # type: ignore[arg-type]


def _record(run_id: str, status: str, device: str = "cpu", **extra: Any) -> RunRecord:
    return RunRecord.from_json(dict(RECORD, id=run_id, status=status, device=device, **extra))


LIST = [
    {"notebook": "notebooks/demo.ipynb", "device": "gpu"},
    {"notebook": "notebooks/demo-replay.ipynb", "device": "cpu", "replay": "allocator"},
]


def test_a_passed_replay_says_it_ran_on_cpu_and_is_not_a_gpu_run() -> None:
    replay = _entry(LIST).reproductions[1]
    status = reproduction_status(replay, _record("demo-replay", "passed"), {"abc"}, several=True)
    assert status.kind == "replayed" and status.label == "replayed on CPU" and status.show_outputs
    assert status.sentence.startswith(
        "CPU replay ran on CPU for the current source, on Demo CPU 9000 on 2026-11-30 01:02 UTC"
    )
    assert "a model of the CUDA caching allocator's rules" in status.sentence
    assert "not a GPU run" in status.sentence and "Reproduced on" not in status.sentence


def test_a_replay_of_an_older_source_is_stale_not_replayed() -> None:
    replay = _entry(LIST).reproductions[1]
    status = reproduction_status(replay, _record("demo-replay", "passed"), {"new"}, several=True)
    assert status.kind == "stale" and not status.show_outputs
    assert "ran on CPU" not in status.sentence


def test_the_gpu_notebook_says_it_was_not_run_here_or_its_recording() -> None:
    gpu = _entry(LIST).reproductions[0]
    skipped = reproduction_status(
        gpu, _record("demo", "skipped-needs-gpu", "gpu"), set(), several=True
    )
    assert skipped.kind == "needs-gpu" and not skipped.show_outputs
    assert skipped.sentence.startswith("GPU notebook not run here: it needs a GPU")
    assert reproduction_status(gpu, None, set(), several=True).sentence == skipped.sentence
    host = {"cpu": "x", "gpu": "NVIDIA H200", "driver": "570.1"}
    recorded = reproduction_status(
        gpu, _record("demo", "recorded-gpu", "gpu", host=host), {"abc"}, several=True
    )
    assert recorded.kind == "recorded"
    assert recorded.sentence.startswith("GPU notebook: recorded on GPU NVIDIA H200 on 2026-11-30")


def test_each_reproduction_reads_its_own_record_and_the_chip_shows_the_strongest() -> None:
    entry = _entry(LIST)
    records = {
        "demo": _record("demo", "skipped-needs-gpu", "gpu"),
        "demo-replay": _record("demo-replay", "passed"),
    }
    parts = reproduction_statuses(Path("/nonexistent"), entry, records)
    assert [p.reproduction.id for p in parts] == ["demo", "demo-replay"]
    assert [p.status.kind for p in parts] == ["needs-gpu", "replayed"]
    assert [p.title for p in parts] == [
        "GPU notebook",
        "CPU replay of the CUDA caching allocator's rules",
    ]
    overall = entry_status(parts)
    assert overall.kind == "replayed" and not overall.show_outputs
    assert overall.admonition == "info"  # not green while the GPU notebook has not run
    assert overall.sentence.startswith("GPU notebook not run here")
    assert "CPU replay ran on CPU for the current source" in overall.sentence
    # A GPU recording outranks the replay.
    records["demo"] = _record("demo", "recorded-gpu", "gpu")
    assert entry_status(reproduction_statuses(Path("/nonexistent"), entry, records)).kind == (
        "recorded"
    )


def test_the_single_form_keeps_its_wording() -> None:
    entry = _entry({"notebook": "notebooks/demo.ipynb", "device": "gpu"})
    (part,) = reproduction_statuses(Path("/nonexistent"), entry, {})
    assert entry_status([part]) is part.status
    assert part.status.sentence.startswith("Not yet reproduced: needs a GPU")
    assert site.status_for(entry, None, set()).sentence == part.status.sentence


def _executed_with_figure(source: dict[str, Any]) -> dict[str, Any]:
    executed = json.loads(json.dumps(source))
    for cell in executed["cells"]:
        if cell["cell_type"] == "code" and "parameters" not in cell["metadata"].get("tags", []):
            cell["outputs"] = [
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"image/png": base64.b64encode(png_bytes()).decode()},
                }
            ]
            break
    return executed


def test_the_page_shows_each_reproduction_with_its_status_and_own_figures(
    tmp_path: Path,
) -> None:
    root = tmp_path
    (root / "notebooks").mkdir()
    (root / "build/executed").mkdir(parents=True)
    for name in ("demo", "demo-replay"):
        (root / f"notebooks/{name}.ipynb").write_text(json.dumps(notebook()))
    entry = _entry(LIST)
    replay = entry.reproductions[1]
    (digest,) = {rp.source_hash(notebook(), replay.data, "ci")}
    executed = "build/executed/demo-replay.ipynb"
    (root / executed).write_text(json.dumps(_executed_with_figure(notebook())))
    records = {
        "demo": _record("demo", "skipped-needs-gpu", "gpu"),
        "demo-replay": _record("demo-replay", "passed", source_hash=digest, executed=executed),
    }
    parts = reproduction_statuses(root, entry, records)
    page_dir = root / "page"
    page_dir.mkdir()
    text, figures = render_reproduction(root, entry, entry_status(parts), page_dir, parts)
    assert figures == 1
    assert sorted(p.name for p in page_dir.iterdir()) == ["figure-demo-replay-1.png"]
    gpu_at = text.index("### GPU notebook")
    replay_at = text.index("### CPU replay of the CUDA caching allocator's rules")
    assert gpu_at < replay_at
    gpu_part, replay_part = text[gpu_at:replay_at], text[replay_at:]
    assert "GPU notebook not run here" in gpu_part and "#### The notebook" in gpu_part
    assert "trainwreck reproduce demo\n" in gpu_part
    assert "It is not a GPU run" in replay_part and "#### The executed notebook" in replay_part
    assert "trainwreck reproduce demo-replay\n" in replay_part
    assert "figure-demo-replay-1.png" in replay_part


def test_the_built_site_shows_both_reproductions(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    root = make_repo(tmp_path / "repo", with_rule=False)
    path = root / "entries/demo-fragmentation.yaml"
    text = path.read_text()
    single = "reproduction:\n  notebook: notebooks/demo-fragmentation.ipynb\n  device: gpu\n"
    assert single in text
    path.write_text(
        text.replace(
            single,
            "reproduction:\n- notebook: notebooks/demo-fragmentation.ipynb\n  device: gpu\n"
            "- notebook: notebooks/demo-fragmentation-replay.ipynb\n  device: cpu\n"
            "  replay: allocator\n  note: Replays the loop's allocations.\n",
        )
    )
    (root / "notebooks/demo-fragmentation-replay.ipynb").write_text(json.dumps(notebook()))
    manifest = fake_run(root)
    entry = load_entry(path, root)
    replay = entry.reproductions[1]
    executed = "build/executed/demo-fragmentation-replay.ipynb"
    (root / executed).write_text(json.dumps(_executed_with_figure(notebook())))
    record = dict(manifest["notebooks"][0], id=replay.id, notebook=replay.notebook)
    record.update(
        source_hash=rp.source_hash(notebook(), replay.data, "ci"),
        executed=executed,
        evidence={"dir": f"build/evidence/{replay.id}", "logs": {"broken": [], "fixed": []},
                  "metrics": None, "figures": []},
    )  # fmt: skip
    manifest["notebooks"].append(record)
    (root / "build/manifest.json").write_text(json.dumps(manifest, indent=2))
    site.build(root, reproduce=False)
    page = root / "site/entries/demo-fragmentation"
    html = (page / "index.html").read_text(encoding="utf-8")
    assert "GPU notebook not run here" in html
    assert "CPU replay ran on CPU for the current source" in html
    assert "It is not a GPU run" in html
    assert (page / "figure-demo-fragmentation-replay-1.png").is_file()
    rows = (root / "site/entries/index.html").read_text(encoding="utf-8")
    assert "replayed on CPU" in rows


def test_review_names_the_entry_of_a_listed_notebook(tmp_path: Path) -> None:
    import subprocess

    from trainwreck.review.compare import review_change

    root = _repo(tmp_path / "kb", GPU_AND_REPLAY, ("base-entry", "base-entry-replay"))
    (root / "rules").mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    (root / "notebooks/base-entry-replay.ipynb").write_text(
        _notebook_json("base-entry-replay", "x = 2")
    )
    review = review_change(root, "main")
    [result] = review.notebooks
    assert (result.id, result.code_changed, result.kind) == ("base-entry-replay", True, "not-run")
    assert result.status.startswith("CPU replay of the CUDA caching allocator's rules: not yet")
    assert any("entries/base-entry/" in page and "reproduction" in page for page in review.pages)
