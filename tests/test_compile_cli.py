"""`trainwreck compile`: precise errors, the bundle, the wheel, and the wheel in a fresh venv."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.venvs import core_venv, install_trainwreck
from trainwreck.cli import main
from trainwreck.compile.bundle import load_bundle_file

ROOT = Path(__file__).resolve().parents[1]

RULE = """# yaml-language-server: $schema=../schemas/rule.schema.json
id: {rule_id}
entry: demo-failure
title: Demo failure line
description: The demo library prints this line when the demo failure happens.
confidence: 0.7
matchers:
  boom:
    regex: 'DemoError: (?P<what>\\w+) exploded after (?P<t>[\\d.]+) ?(?P<u>ms|s)'
    values: {{t: {{unit_capture: u}}}}
condition: '{condition}'
tests:
  match: [tests/logs/demo/boom.log]
  clean: [tests/logs/demo/healthy.log]
"""


def make_repo(
    root: Path, condition: str = "boom and boom.t >= 1s", rule_id: str = "demo-boom"
) -> Path:
    (root / "entries").mkdir(parents=True, exist_ok=True)
    (root / "entries" / "demo-failure.yaml").write_text(
        "id: demo-failure\ntitle: Demo failure\nroot_causes: [The demo cause.]\n"
        "fix:\n  primary: {title: Fix the demo, steps: [Do the fix., {do: Run it, code: demo --fix}]}\n"
        "  verify: [The line is gone.]\nrelated: []\n"
    )
    (root / "rules").mkdir(exist_ok=True)
    (root / "rules" / f"{rule_id}.yaml").write_text(
        RULE.format(rule_id=rule_id, condition=condition)
    )
    logs = root / "tests" / "logs" / "demo"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "boom.log").write_text("start\n[rank2]: DemoError: widget exploded after 1.5 s\n")
    (logs / "healthy.log").write_text("start\nDemoError: widget exploded after 5 ms\nend\n")
    (root / "mkdocs.yml").write_text(
        "site_name: Demo\nsite_url: https://kb.trainwreck-demo.net/kb\n"
    )
    return root


def test_compile_writes_bundle_and_wheel(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    code = main(["compile", "--root", str(repo), "--out", "dist", "--pack-version", "1.2.3"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "compiled 1 rules for 1 entries, regression logs pass" in out.out
    bundle = load_bundle_file(repo / "build" / "rules" / "bundle.json")
    assert [r["id"] for r in bundle.rules] == ["demo-boom"]
    summary = bundle.entries["demo-failure"]
    assert summary["url"] == "https://kb.trainwreck-demo.net/kb/entries/demo-failure/"
    assert summary["root_cause"] == "The demo cause."
    assert summary["fix"]["title"] == "Fix the demo"
    assert summary["fix"]["steps"] == ["Do the fix.", "Run it\ndemo --fix"]
    assert summary["verify"] == ["The line is gone."]
    wheel = repo / "dist" / "trainwreck_rules-1.2.3-py3-none-any.whl"
    assert wheel.is_file()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "trainwreck_rules/bundle.json" in names and "trainwreck_rules/entries.json" in names
        info = "trainwreck_rules-1.2.3.dist-info"
        metadata_text = archive.read(f"{info}/METADATA").decode()
        assert "Name: trainwreck-rules\n" in metadata_text and "Version: 1.2.3\n" in metadata_text
        assert "Tag: py3-none-any" in archive.read(f"{info}/WHEEL").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        assert (
            entry_points == "[trainwreck.rules]\ntrainwreck-rules = trainwreck_rules:bundle_path\n"
        )
        record = list(csv.reader(io.StringIO(archive.read(f"{info}/RECORD").decode())))
        assert {row[0] for row in record} == set(names)
        for path, digest, size in record:
            if path.endswith("RECORD"):
                assert digest == "" and size == ""
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)
    # Same rules, same wheel (fixed timestamps): reproducible.
    first = wheel.read_bytes()
    assert main(["compile", "--root", str(repo), "--pack-version", "1.2.3"]) == 0
    assert wheel.read_bytes() == first


def test_compile_errors_are_file_line_col(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo", condition="boom and stalz")
    code = main(["compile", "--root", str(repo), "--no-wheel"])
    err = capsys.readouterr().err
    assert code == 1
    assert "rules/demo-boom.yaml:11:22: condition: unknown name 'stalz'" in err
    assert "nothing written" in err
    assert not (repo / "build" / "rules" / "bundle.json").exists()


def test_compile_runs_the_regression_logs(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo", condition="boom")  # also fires on the 5 ms clean line
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    assert (
        "rules/demo-boom.yaml:14:11: tests.clean[0]: rule fired on clean log 'tests/logs/demo/healthy.log'"
        " (first evidence tests/logs/demo/healthy.log:2)" in err
    )
    (repo / "tests" / "logs" / "demo" / "boom.log").unlink()
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    assert (
        "tests.match[0]: regression log 'tests/logs/demo/boom.log' does not exist"
        in capsys.readouterr().err
    )
    assert main(["compile", "--root", str(repo), "--no-wheel", "--no-tests"]) == 0


def test_compile_rejects_bad_re2_pattern_and_schema(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    path = repo / "rules" / "demo-boom.yaml"
    text = path.read_text().replace("'DemoError: (?P<what>\\w+)", "'DemoError: (?P<what>\\w+)(?!x)")
    text = text.replace("confidence: 0.7", "confidence: 1.7\nbogus: 1")
    path.write_text(text)
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    assert "rules/demo-boom.yaml:6:13: confidence: 1.7 is greater than the maximum of 1" in err
    assert "rules/demo-boom.yaml:7:1: bogus: unknown property 'bogus'" in err
    # With the schema fixed, the RE2 problem is located inside the pattern.
    path.write_text(text.replace("confidence: 1.7\nbogus: 1", "confidence: 0.7"))
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    assert "rules/demo-boom.yaml:9:37: matchers.boom.regex: lookaround" in err
    assert "has no capture" not in err  # no follow-on errors from the broken pattern


def test_compile_bad_yaml_and_usage(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    (repo / "rules" / "broken.yaml").write_text("id: [unclosed\n")
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    assert "rules/broken.yaml:2:1: YAML syntax error" in capsys.readouterr().err
    assert main(["compile", "--root", str(repo), "--pack-version", "not a version"]) == 2


def test_the_repository_rules_compile():
    """The real rules/ of this checkout: every rule valid and its regression logs passing."""
    from trainwreck.compile.command import compile_rules

    bundle, problems = compile_rules(ROOT, run_tests=False)
    ours = [
        p
        for p in problems
        if p.file.startswith(("rules/gc-straggler", "rules/allocator-fragmentation"))
    ]
    assert not [str(p) for p in ours if p.severity == "error"]
    if bundle is not None:
        ids = {rule["id"] for rule in bundle["rules"]}
        assert {
            "gc-straggler-step-time",
            "gc-straggler-probe-gc",
            "allocator-fragmentation-oom",
        } <= ids


# --- a fresh environment with only the core install ------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None, reason="needs a checkout")
def test_rule_wheel_in_a_fresh_core_only_venv(tmp_path):
    python = core_venv(tmp_path / "fresh", tmp_path / "core-site")
    pip = [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    install_trainwreck(python, tmp_path / "wheels")
    # Compile a rule pack from a demo repository and install its wheel.
    repo = make_repo(tmp_path / "repo")
    assert main(["compile", "--root", str(repo), "--pack-version", "2.0.0"]) == 0
    subprocess.run(
        [*pip, str(repo / "dist" / "trainwreck_rules-2.0.0-py3-none-any.whl")],
        check=True,
        capture_output=True,
    )
    # Diagnose a log from a folder outside any checkout.
    outside = tmp_path / "ops"
    outside.mkdir()
    (outside / "job.log").write_text("[rank5]: DemoError: gizmo exploded after 2 s\n")
    probe = (
        "import sys, runpy, json\n"
        "sys.argv = ['trainwreck', 'diagnose', 'job.log', '--format', 'json']\n"
        "from trainwreck.cli import main\n"
        "code = main()\n"
        "heavy = sorted(m for m in ('torch', 'jupyter', 'nbclient', 'nbformat', 'mkdocs', 'matplotlib') if m in sys.modules)\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(python), "-c", probe],
        cwd=outside,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    status = json.loads(done.stderr.strip().splitlines()[-1])
    assert status == {"code": 1, "heavy": []}, done.stderr
    report = json.loads(done.stdout)
    finding = report["findings"][0]
    assert finding["entry"] == "demo-failure" and finding["rule"] == "demo-boom"
    assert finding["ranks"] == [5]
    assert finding["url"] == "https://kb.trainwreck-demo.net/kb/entries/demo-failure/"
    # explain and suggestions work from the installed rule pack as well.
    explained = subprocess.run(
        [str(python), "-m", "trainwreck", "explain", "job.log", "demo-boom", "--format", "json"],
        cwd=outside,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["matchers"]["boom"]["lines"][0]["rank"] == 5
    (outside / "other.log").write_text("RuntimeError: demo failure, the widget went missing\n")
    other = subprocess.run(
        [str(python), "-m", "trainwreck", "diagnose", "other.log", "--format", "json"],
        cwd=outside,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert other.returncode == 0, other.stderr
    suggested = json.loads(other.stdout)
    assert suggested["findings"] == []
    assert [s["entry"] for s in suggested["suggestions"]] == ["demo-failure"]
    # The installed trainwreck is the wheel, not this checkout.
    where = subprocess.run(
        [str(python), "-c", "import trainwreck; print(trainwreck.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=outside,
    )
    assert str(ROOT / "src") not in where.stdout
