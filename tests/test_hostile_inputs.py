"""One bad input never takes down a run (issue 10): hostile entries, rules and regression logs
given to check, compile and diagnose in a checkout. Each is one located problem for its file,
never a traceback, and the rest of the repository still works."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.test_compile_cli import make_repo
from trainwreck import model
from trainwreck.check import check_entries
from trainwreck.cli import main
from trainwreck.model import DocumentError, parse_yaml

HOSTILE_ENTRIES = {
    "recursive-alias": "a: &a [*a]\n",
    "deep-nesting": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "huge-integer": "a: " + "9" * 5000 + "\n",
    "unknown-tag": "a: !foo x\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ENTRIES))
def test_hostile_yaml_is_one_problem_at_its_line(case: str) -> None:
    with pytest.raises(DocumentError) as raised:
        parse_yaml(HOSTILE_ENTRIES[case], f"entries/{case}.yaml")
    problem = raised.value.problem
    assert (problem.file, problem.line) == (f"entries/{case}.yaml", 1)
    assert problem.column > 1


@pytest.mark.parametrize("case", sorted(HOSTILE_ENTRIES))
def test_compile_check_and_diagnose_survive_a_hostile_entry(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "repo")
    text = HOSTILE_ENTRIES[case]
    if case == "deep-nesting":  # the 100k levels above cost a second per parse; 1000 suffice
        text = "a: " + "[" * 1000 + "]" * 1000 + "\n"
    (repo / "entries" / "hostile.yaml").write_text(text)

    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 0
    assert "compiled 1 rules for 1 entries" in capsys.readouterr().out

    problems, _ = check_entries(repo, [repo / "entries" / "hostile.yaml"])
    assert [(p.file, p.line) for p in problems] == [("entries/hostile.yaml", 1)]

    log = tmp_path / "run.log"
    log.write_text("[rank1]: DemoError: widget exploded after 2 s\n")
    code = main(["diagnose", "--root", str(repo), "--no-installed", "--format", "json", str(log)])
    assert code == 1
    assert [f["entry"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["demo-failure"]


def test_many_unary_minus_signs_are_a_condition_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "repo", condition="boom.t > " + "-" * 3900 + "1")
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    assert "rules/demo-boom.yaml:" in err and "condition nests deeper than" in err
    assert "Traceback" not in err


def test_long_sums_are_a_condition_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "repo", condition="boom.t > 0" + "+1" * 1900)
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    assert "condition nests deeper than" in err
    assert "Traceback" not in err


def _point_match_log_at(repo: Path, target: str) -> None:
    rule = repo / "rules" / "demo-boom.yaml"
    rule.write_text(
        rule.read_text().replace("match: [tests/logs/demo/boom.log]", f"match: ['{target}']")
    )


@pytest.mark.parametrize(
    "target", ["../outside.log", "{outside}", "tests/../../outside.log", "tests/logs/demo/link.log"]
)
def test_regression_logs_are_confined_to_tests(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside.log"
    outside.write_text("[rank2]: DemoError: widget exploded after 1.5 s\n")  # would match
    os.symlink(outside, repo / "tests" / "logs" / "demo" / "link.log")
    _point_match_log_at(repo, target.format(outside=outside))
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    assert "rules/demo-boom.yaml:" in err
    assert "must be a regular file under tests/ of the repository" in err


def test_a_fifo_as_regression_log_is_refused_without_opening_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "repo")
    os.mkfifo(repo / "tests" / "logs" / "demo" / "fifo.log")  # no writer: opening would hang
    _point_match_log_at(repo, "tests/logs/demo/fifo.log")
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    assert "must be a regular file under tests/ of the repository" in capsys.readouterr().err


CHECK_CASES = Path(__file__).resolve().parent / "check_cases"


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_check_never_opens_a_notebook_outside_notebooks(tmp_path: Path, how: str) -> None:
    repo = tmp_path / "repo"
    (repo / "entries").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    shutil.copytree(Path(__file__).resolve().parents[1] / "schemas", repo / "schemas")
    outside = tmp_path / "secret.ipynb"
    outside.write_text("not json: the contents of a file outside the repository")
    named = {"dotdot": "../secret.ipynb", "absolute": str(outside)}.get(
        how, "notebooks/base-entry.ipynb"
    )
    if how == "symlink":
        os.symlink(outside, repo / "notebooks" / "base-entry.ipynb")
    text = (CHECK_CASES / "base-entry.yaml").read_text()
    text = text.replace(
        "  not_reproducible: It is a test fixture, not a failure.",
        f"  notebook: '{named}'\n  device: cpu",
    )
    (repo / "entries" / "base-entry.yaml").write_text(text)
    problems, _ = check_entries(repo, [repo / "entries" / "base-entry.yaml"])
    messages = [str(p) for p in problems]
    assert any(
        m.startswith("entries/base-entry.yaml:49:")
        and f"notebook {named} must be a regular file in notebooks/" in m
        for m in messages
    ), messages
    assert not any("JSON" in m or "secret" in m.split(":", 1)[0] for m in messages), messages


def test_a_crash_in_any_command_exits_4_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import trainwreck.check

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.delenv("TRAINWRECK_DEBUG", raising=False)
    monkeypatch.setattr(trainwreck.check, "run", broken)
    assert main(["check", "--root", str(tmp_path)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error (RuntimeError: a bug)" in err


@pytest.mark.skipif(not model.yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_libyaml_and_pyyaml_give_the_same_data_and_positions() -> None:
    """The fast loader (libyaml's parser under the refusing composer) must read every YAML file
    of the repository exactly as PyYAML's own parser does, positions included."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(
        [*root.glob("entries/*.yaml"), *root.glob("rules/*.yaml"), *root.glob("tests/**/*.yaml")]
    )
    assert len(files) > 150
    for path in files:
        try:
            text = model.read_text(path, str(path))
            slow = model.parse_yaml_with(text, str(path), model._PythonLoader)
        except DocumentError:
            continue  # (a malformed case: read again by PyYAML, see the next test)
        fast = model.parse_yaml_with(text, str(path), model._Loader)
        assert (fast.data, fast.positions) == (slow.data, slow.positions), path


@pytest.mark.parametrize("case", sorted(HOSTILE_ENTRIES))
def test_the_fast_loader_refuses_what_pyyaml_refuses(case: str) -> None:
    """Recursive aliases and unknown tags are refused by the composer on top of libyaml too;
    whatever libyaml refuses on its own is read again by PyYAML, so the problem is the same."""
    text = HOSTILE_ENTRIES[case]
    with pytest.raises(DocumentError) as via_pyyaml:
        model.parse_yaml_with(text, "e.yaml", model._PythonLoader)
    with pytest.raises(DocumentError) as default:
        parse_yaml(text, "e.yaml")
    assert default.value.problem == via_pyyaml.value.problem
