"""`trainwreck new ID`: skeletons that check and compile as written (each TODO a warning, a
half-written rule left out of the bundle), and never overwrite."""

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


def test_entry_skeleton_checks_clean_with_each_todo_a_warning(repo: Path) -> None:
    """As written, the skeleton has no error: every placeholder is a value the schema accepts,
    and check lists each line still saying TODO as a warning, at that line."""
    scaffold(repo, "demo-failure", today="2026-11-30")
    problems, checked = check_entries(repo, [repo / "entries/demo-failure.yaml"])
    assert checked == 1
    assert [p for p in problems if p.severity == "error"] == []
    text = (repo / "entries/demo-failure.yaml").read_text()
    lines = text.splitlines()
    todo = [p for p in problems if "placeholder left by `trainwreck new`" in p.message]
    assert all(p.severity == "warning" for p in todo)
    expected = [n for n, line in enumerate(lines, 1) if "TODO" in line and not line.startswith("#")]
    assert sorted(p.line for p in todo) == expected
    # Every section a contributor must write has its warning.
    for section in (
        "title", "category", "severity", "tags", "summary", "mechanism", "root_causes",
        "symptoms", "affected_systems", "confirm", "fix", "prevention", "fingerprint",
        "code_examples", "scale", "faq", "references",
    ):  # fmt: skip
        start = next(n for n, line in enumerate(lines, 1) if line.startswith(f"{section}:"))
        following = next(
            (n for n, line in enumerate(lines[start:], start + 1) if line[:1].isalpha()),
            len(lines) + 1,
        )
        assert any(start <= p.line < following for p in todo), section
    # Filled in (here: the TODO words taken out), the warnings are gone and nothing else appears.
    (repo / "entries/demo-failure.yaml").write_text(text.replace("TODO", "filled"))
    problems, _ = check_entries(repo, [repo / "entries/demo-failure.yaml"])
    assert not [p for p in problems if p.severity != "note"], problems


def test_half_written_rule_warns_once_and_holds_nothing_up(repo: Path) -> None:
    """The rule skeleton is left out of the bundle with one warning (compile shows it); the
    in-memory compile diagnose runs reports no error, so diagnose warns about nothing."""
    from trainwreck.compile.packs import compile_folder
    from trainwreck.rules.model import load_rules

    scaffold(repo, "demo-failure")
    loaded = load_rules(repo)
    assert loaded.rules == []
    assert [(p.file, p.severity) for p in loaded.problems] == [
        ("rules/demo-failure.yaml", "warning")
    ]
    assert "rule not finished" in loaded.problems[0].message
    bundle, problems = compile_folder(repo, cache=False)
    assert bundle.rules == [] and not [p for p in problems if p.severity == "error"]
    # Once no line says TODO, the rule is validated like any other: here its empty tests.
    rule = repo / "rules/demo-failure.yaml"
    rule.write_text(rule.read_text().replace("TODO", "filled"))
    assert [(p.path, p.severity) for p in load_rules(repo).problems] == [
        ("tests.match", "error"),
        ("tests.clean", "error"),
    ]


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
