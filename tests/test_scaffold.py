"""`trainwreck new ID`: skeletons that fail check until filled, and never overwrite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainwreck.check import check_entries
from trainwreck.cli import main
from trainwreck.model import load_yaml
from trainwreck.scaffold import scaffold

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "schemas", tmp_path / "schemas")
    return tmp_path


def test_new_writes_three_files(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "--root", str(repo), "demo-failure"]) == 0
    out = capsys.readouterr().out
    for path in (
        "entries/demo-failure.yaml",
        "rules/demo-failure.yaml",
        "notebooks/demo-failure.ipynb",
    ):
        assert (repo / path).is_file()
        assert path in out
    entry = (repo / "entries/demo-failure.yaml").read_text()
    assert entry.startswith("# yaml-language-server: $schema=../schemas/entry.schema.json\n")
    rule = (repo / "rules/demo-failure.yaml").read_text()
    assert rule.startswith("# yaml-language-server: $schema=../schemas/rule.schema.json\n")
    data = load_yaml(repo / "rules/demo-failure.yaml").data
    assert data["id"] == "demo-failure" and data["entry"] == "demo-failure"


def test_entry_skeleton_fails_check_at_every_todo(repo: Path) -> None:
    scaffold(repo, "demo-failure", today="2026-11-30")
    problems, checked = check_entries(repo, [repo / "entries/demo-failure.yaml"])
    errors = [p for p in problems if p.severity == "error"]
    assert checked == 1
    located = {p.path.split("[")[0].split(".")[0] for p in errors}
    # Every section a contributor must write is reported, each at its own line.
    for section in (
        "title", "category", "severity", "tags", "summary", "mechanism", "root_causes",
        "symptoms", "affected_systems", "confirm", "fix", "prevention", "fingerprint",
        "code_examples", "scale", "faq", "references",
    ):  # fmt: skip
        assert section in located, section
    lines = (repo / "entries/demo-failure.yaml").read_text().splitlines()
    for problem in errors:
        assert "TODO" in lines[problem.line - 1], str(problem)
    # The reproduction block points at the notebook that was written, and is valid.
    assert not any(p.path.startswith("reproduction") for p in errors)


def test_notebook_skeleton_has_a_parameters_cell(repo: Path) -> None:
    scaffold(repo, "demo-failure")
    notebook = json.loads((repo / "notebooks/demo-failure.ipynb").read_text())
    assert notebook["nbformat"] == 4
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code[0]["metadata"]["tags"] == ["parameters"]
    assert 'scale = "ci"' in code[0]["source"]
    assert 'evidence_dir = "build/evidence/demo-failure"' in code[0]["source"]
    # Until written, running it fails instead of passing silently.
    assert any("NotImplementedError" in c["source"] for c in code)
    assert [c for c in notebook["cells"] if c["cell_type"] == "markdown"]


def test_notebook_skeleton_is_valid_nbformat(repo: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    scaffold(repo, "demo-failure")
    nbformat.validate(nbformat.read(repo / "notebooks/demo-failure.ipynb", as_version=4))


def test_refuses_to_overwrite(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "rules").mkdir()
    (repo / "rules/demo-failure.yaml").write_text("mine\n")
    assert main(["new", "--root", str(repo), "demo-failure"]) == 1
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err and "rules/demo-failure.yaml" in err
    assert "Traceback" not in err
    # Nothing was written, and the existing file is untouched.
    assert (repo / "rules/demo-failure.yaml").read_text() == "mine\n"
    assert not (repo / "entries/demo-failure.yaml").exists()
    assert not (repo / "notebooks/demo-failure.ipynb").exists()


@pytest.mark.parametrize("bad", ["Bad_Id", "trailing-", "two--hyphens", "../escape", ""])
def test_rejects_bad_ids(repo: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "--root", str(repo), bad]) == 2
    assert "kebab-case" in capsys.readouterr().err
    assert not (repo / "entries").exists()
