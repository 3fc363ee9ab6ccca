"""The composite action (action.yml): each run step executed locally the way the runner does.

The runner gives a composite step its `env:` with every `${{ }}` expression evaluated, runs
`bash --noprofile --norc -eo pipefail` on the script, and reads step outputs back from the file
named by GITHUB_OUTPUT; this test does the same, offline, in a fresh core-only venv.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.venvs import core_venv, trainwreck_wheel
from trainwreck.rules.model import load_rules

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def evaluate(value: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    """The `${{ inputs.X }}` and `${{ steps.ID.outputs.K }}` expressions the action uses."""

    def one(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression.startswith("inputs."):
            return inputs[expression.removeprefix("inputs.")]
        found = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression)
        if found:
            return outputs.get(found.group(1), {}).get(found.group(2), "")
        raise AssertionError(f"the test does not know the expression {expression!r}")

    return EXPRESSION.sub(one, str(value))


class Runner:
    """Runs the action's steps in order, keeping step outputs like the runner does."""

    def __init__(self, tmp: Path, inputs: dict[str, str]):
        self.tmp = tmp
        defaults = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
        self.inputs = {**defaults, **inputs}
        self.outputs: dict[str, dict[str, str]] = {}
        self.summary = tmp / "step-summary.md"
        self.summary.touch()
        (tmp / "runner").mkdir(exist_ok=True)

    def run(self, step: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        assert step["shell"] == "bash"
        output_file = self.tmp / f"output-{step['id']}"
        output_file.write_text("")
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.tmp),
            "GITHUB_ACTION_PATH": str(ROOT),
            "RUNNER_TEMP": str(self.tmp / "runner"),
            "GITHUB_OUTPUT": str(output_file),
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "PIP_NO_INDEX": "1",  # offline: the core dependencies come from the venv's links
        }
        for name, value in (step.get("env") or {}).items():
            env[name] = evaluate(value, self.inputs, self.outputs)
        script = self.tmp / f"step-{step['id']}.sh"
        script.write_text(step["run"])
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=self.tmp / "workspace",
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        values = dict(
            line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line
        )
        self.outputs[step["id"]] = values
        return done


def test_the_action_is_composite_and_injection_safe():
    assert ACTION["runs"]["using"] == "composite"
    for step in ACTION["runs"]["steps"]:
        assert "${{" not in step["run"], f"step {step['name']!r}: expressions go through env:"
        assert step["shell"] == "bash" and step["id"]
    for name, output in ACTION["outputs"].items():
        assert EXPRESSION.fullmatch(output["value"]), name


def _known_failure() -> tuple[str, str]:
    """A regression log a rule must match, and the entry the rule names."""
    for rule in load_rules(ROOT).rules:
        for log in rule["tests"]["match"]:
            if (ROOT / log).is_file():
                return log, rule["entry"]
    pytest.skip("no single-file regression log in rules/")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_action_steps_diagnose_a_known_failure_into_the_summary(tmp_path):
    log, entry = _known_failure()
    workspace = tmp_path / "workspace"
    (workspace / "logs").mkdir(parents=True)
    shutil.copy(ROOT / log, workspace / "logs" / "train.log")
    (workspace / "clean.log").write_text("step 1 loss 2.31\nstep 2 loss 2.29\n")
    # A rules/ folder in the user's repository must not be compiled as if it were a pack.
    (workspace / "rules").mkdir()
    (workspace / "rules" / "unrelated.yaml").write_text("not: a trainwreck rule\n")
    wheel = trainwreck_wheel(tmp_path / "wheels")
    # The venv the install step would create, made here with the core dependencies linked in
    # (no network); the step reuses an existing one.
    python = core_venv(tmp_path / "runner" / "trainwreck", tmp_path / "core-site")
    install, diagnose = ACTION["runs"]["steps"]

    runner = Runner(tmp_path, {"logs": "logs/", "trainwreck": str(wheel), "python": str(python)})
    done = runner.run(install)
    assert done.returncode == 0, done.stderr
    assert runner.outputs["install"]["python"] == str(python)
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout
    assert "trainwreck-rules==" in listed and "trainwreck==" in listed

    done = runner.run(diagnose)
    assert done.returncode == 0, done.stderr  # fail-on-finding defaults to false
    summary = runner.summary.read_text()
    assert summary.startswith("# Trainwreck diagnosis\n")
    assert f"entries/{entry}/" in summary or f"**Entry:** `{entry}`" in summary
    assert "logs/train.log:" in summary
    findings = int(runner.outputs["diagnose"]["findings"])
    assert findings >= 1
    assert Path(runner.outputs["diagnose"]["report"]).read_text() in summary

    strict = Runner(tmp_path, {"logs": "logs/", "fail-on-finding": "true", "python": str(python)})
    strict.outputs = runner.outputs
    done = strict.run(diagnose)
    assert done.returncode == 1
    assert f"::error::trainwreck found {findings} known failure(s)" in done.stdout

    clean = Runner(tmp_path, {"logs": "clean.log", "fail-on-finding": "true"})
    clean.outputs = runner.outputs
    done = clean.run(diagnose)
    assert done.returncode == 0, done.stderr
    assert clean.outputs["diagnose"]["findings"] == "0"
    assert "No known failure found." in clean.summary.read_text()

    # A log named and written to forge the job summary (audit 1.19, 1.20, 2.4): its name and
    # line are shown in code spans, as text.
    hostile = workspace / "hostile"
    hostile.mkdir()
    (hostile / "n\n# INJECTED\n<img src=x onerror=alert(1)>\n.log").write_text(
        "Error: DataLoader workers' memory grows every epoch: copy-on-read of Python objects "
        "shared by fork <img src=x onerror=alert(1)> [c](https://e.x)\n"
    )
    (tmp_path / "forged").mkdir()
    (tmp_path / "forged" / "workspace").symlink_to(workspace)
    forged = Runner(tmp_path / "forged", {"logs": "hostile/"})
    forged.outputs = runner.outputs
    done = forged.run(diagnose)
    assert done.returncode == 0, done.stderr
    summary = forged.summary.read_text()
    assert (
        "dataloader-copy-on-read-leak" in summary and forged.outputs["diagnose"]["findings"] == "0"
    )
    prose = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", summary)
    assert "<" not in prose and "](" not in prose, prose
    assert [line for line in prose.splitlines() if line.startswith("#")] == [
        "# Trainwreck diagnosis"
    ]

    missing = Runner(tmp_path, {"logs": "no-such.log"})
    missing.outputs = runner.outputs
    done = missing.run(diagnose)
    assert done.returncode == 2
    assert "trainwreck: no such file or folder: no-such.log" in missing.summary.read_text()
