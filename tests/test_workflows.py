"""The contribution loop's GitHub files: workflows (actionlint, pinned actions, least privilege,
no expression pasted into a shell), the private pack's workflow, issue forms, the pull-request
template and the pre-commit hooks."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwreck.cli import main
from trainwreck.scaffold import PACK_ACTIONS, pack_files

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(?:\s+#\s*(\S+))?\s*$", re.MULTILINE)
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _load(path: Path) -> dict[str, Any]:
    # PyYAML reads the key `on` as the boolean True (YAML 1.1).
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in data:
        data["on"] = data.pop(True)
    return data


def _actionlint() -> str | None:
    """The binary the `dev` extra installs beside this interpreter, or one on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "actionlint"
    return str(beside) if beside.is_file() else shutil.which("actionlint")


def test_the_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {
        "ci.yml",
        "review-comment.yml",
        "pages.yml",
        "release.yml",
    }


@pytest.mark.skipif(
    _actionlint() is None and not os.environ.get("CI"),
    reason="actionlint is not installed (pip install -e '.[dev]')",
)
def test_actionlint_passes_on_every_workflow(tmp_path):
    pack_workflow = tmp_path / ".github" / "workflows" / "rules.yml"
    pack_workflow.parent.mkdir(parents=True)
    pack_workflow.write_text(pack_files("acme-rules")[".github/workflows/rules.yml"])
    done = subprocess.run(
        [_actionlint(), "-no-color", *map(str, WORKFLOWS), str(pack_workflow)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(_actionlint() is None, reason="actionlint is not installed")
def test_actionlint_catches_a_broken_workflow(tmp_path):
    # The check above is only worth something if this actionlint really reads workflows.
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - run: echo ${{ github.event.pull_request.titel }}\n"
        "        shell: bassh\n"
    )
    done = subprocess.run(
        [_actionlint(), "-no-color", str(broken)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "shell" in done.stdout


def _all_uses() -> list[tuple[str, str, str | None]]:
    texts = {p.relative_to(ROOT).as_posix(): p.read_text() for p in WORKFLOWS}
    texts["action.yml"] = (ROOT / "action.yml").read_text()
    texts["pack rules.yml"] = pack_files("acme-rules")[".github/workflows/rules.yml"]
    return [
        (name, m.group(1), m.group(2)) for name, text in texts.items() for m in USES.finditer(text)
    ]


def test_every_action_is_pinned_to_a_commit_with_its_version():
    uses = _all_uses()
    assert len(uses) >= 10
    by_action: dict[str, set[str]] = {}
    for where, ref, version in uses:
        assert PINNED.match(ref), f"{where}: {ref} is not pinned to a commit sha"
        assert version and re.fullmatch(r"v\d+(\.\d+)*", version), (
            f"{where}: {ref} needs '# vX.Y.Z'"
        )
        by_action.setdefault(ref.split("@")[0], set()).add(ref)
    # One version of each action everywhere, the pack's template included.
    assert all(len(refs) == 1 for refs in by_action.values()), by_action
    for spec in PACK_ACTIONS.values():
        ref = spec.split(" #")[0]
        assert ref in by_action[ref.split("@")[0]]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_no_expression_in_a_shell(path):
    data = _load(path)
    assert "pull_request_target" not in data["on"], (
        "pull_request_target runs fork code with secrets"
    )
    assert data["permissions"] == {"contents": "read"}, "the default token is read-only"
    for name, job in data["jobs"].items():
        for scope, level in (job.get("permissions") or {}).items():
            assert level in ("read", "write", "none"), (name, scope)
        for step in job.get("steps", []):
            if "run" in step:
                # Expressions reach scripts through env:, never pasted in (script injection).
                assert "${{" not in step["run"], f"{path.name}/{name}: {step.get('name')}"
    text = path.read_text()
    if "pull_request" in data["on"]:
        assert "secrets." not in text, "a pull-request workflow must not use secrets"
        assert all(
            "write" not in (job.get("permissions") or {}).values() for job in data["jobs"].values()
        )


def test_release_publishes_with_trusted_publishing_only():
    data = _load(ROOT / ".github" / "workflows" / "release.yml")
    publish = data["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert "secrets." not in (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert any("pypa/gh-action-pypi-publish@" in s.get("uses", "") for s in publish["steps"])


def test_issue_forms_and_pull_request_template():
    forms = sorted((ROOT / ".github" / "ISSUE_TEMPLATE").glob("*.yml"))
    names = {p.name for p in forms}
    assert {"report-failure.yml", "propose-entry.yml"} <= names
    for path in forms:
        if path.name == "config.yml":
            continue
        form = yaml.safe_load(path.read_text())
        assert form["name"] and form["description"], path.name
        ids = []
        for item in form["body"]:
            assert item["type"] in ("markdown", "textarea", "input", "dropdown", "checkboxes")
            if item["type"] != "markdown":
                ids.append(item["id"])
                assert item["attributes"]["label"]
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate ids"
    report = yaml.safe_load(
        (ROOT / ".github" / "ISSUE_TEMPLATE" / "report-failure.yml").read_text()
    )
    assert {"log", "versions", "launcher", "happened"} <= {i.get("id") for i in report["body"]}
    template = (ROOT / ".github" / "pull_request_template.md").read_text()
    for item in ("Own words", "Sourced wordings", "Reproduction status", "Confusables linked"):
        assert f"- [ ] **{item}**" in template


def test_pre_commit_hooks_run_the_commands_they_name(tmp_path, capsys):
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"trainwreck-check", "trainwreck-compile"}
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    local = [h for repo in config["repos"] if repo["repo"] == "local" for h in repo["hooks"]]
    assert {h["id"] for h in local} == set(hooks)
    # A scratch knowledge base with one valid entry: each hook's command, as pre-commit would
    # call it from the repository root, passes; a broken entry fails the check hook.
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    (tmp_path / "entries").mkdir()
    shutil.copy(ROOT / "tests" / "check_cases" / "base-entry.yaml", tmp_path / "entries")
    for hook in hooks.values():
        assert re.search(hook["files"], "entries/base-entry.yaml")
        argv = shlex.split(hook["entry"])
        assert argv[0] == "trainwreck"
        files = ["entries/base-entry.yaml"] if hook["pass_filenames"] else []
        code = main([*argv[1:], "--root", str(tmp_path), *[str(tmp_path / f) for f in files]])
        expected = 0 if hook["id"] == "trainwreck-check" else 1  # compile: no rules yet
        assert code == expected, (hook["id"], capsys.readouterr())
    broken = tmp_path / "entries" / "base-entry.yaml"
    broken.write_text(broken.read_text().replace("severity: medium", "severity: huge"))
    assert main(["check", "--root", str(tmp_path), str(broken)]) == 1


def _ci_step(name: str) -> dict[str, Any]:
    data = _load(ROOT / ".github" / "workflows" / "ci.yml")
    steps = [step for job in data["jobs"].values() for step in job.get("steps", [])]
    return next(step for step in steps if step.get("name", "").startswith(name))


def test_reproduce_step_passes_only_kebab_case_ids_after_a_double_dash(tmp_path):
    """A pull request adding notebooks/-j999.ipynb must not hand `-j999` to trainwreck as an
    option (audit 2.7): ids are kebab-case (no leading hyphen) and follow `--`."""
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "notebooks" / "base.ipynb").write_text("{}")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    for name in ("-j999", "--force", "good-id", "a--b", "x-"):
        (repo / "notebooks" / f"{name}.ipynb").write_text("{}")
    subprocess.run([*git, "add", "--", "notebooks"], check=True)
    subprocess.run([*git, "commit", "-qm", "hostile"], check=True)
    stub = tmp_path / "bin" / "trainwreck"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done > "$ARGV_FILE"\n')
    stub.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{stub.parent}{os.pathsep}{os.environ['PATH']}",
        BASE_SHA=base.strip(),
        ARGV_FILE=str(tmp_path / "argv"),
    )
    script = _ci_step("trainwreck reproduce")["run"]
    done = subprocess.run(["bash", "-e", "-c", script], cwd=repo, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "argv").read_text().split("\n")[:-1] == ["reproduce", "--", "good-id"]
