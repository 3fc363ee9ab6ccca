"""Private rule packs: `trainwreck new --pack`, a rule added, compiled to a wheel, installed in a
fresh core-only venv next to the public pack, and used by `trainwreck diagnose`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.test_compile_cli import make_repo
from tests.venvs import core_venv, pip_install, trainwreck_wheel
from trainwreck.cli import main
from trainwreck.compile.command import compile_rules
from trainwreck.compile.wheel import write_wheel

ROOT = Path(__file__).resolve().parents[1]
BASE_ENTRY = ROOT / "tests" / "check_cases" / "base-entry.yaml"

RULE = r"""# yaml-language-server: $schema=../schemas/rule.schema.json
id: acme-quota
entry: acme-quota
title: ACME storage quota exceeded
description: ACME's storage gateway prints this line when a job writes past its quota.
confidence: 0.8
matchers:
  quota:
    regex: 'acmefs: quota exceeded for project (?P<project>[\w-]+)'
condition: quota
tests:
  match: [tests/logs/acme-quota/quota.log]
  clean: [tests/logs/acme-quota/healthy.log]
"""


def test_new_pack_writes_a_repository_and_never_overwrites(tmp_path, capsys):
    assert main(["new", "--pack", "acme-rules", "--root", str(tmp_path)]) == 0
    pack = tmp_path / "acme-rules"
    assert f"created {pack}" in capsys.readouterr().out
    for name in ("pyproject.toml", "README.md", "mkdocs.yml", ".gitignore", "rules/.gitkeep"):
        assert (pack / name).is_file(), name
    workflow = (pack / ".github" / "workflows" / "rules.yml").read_text()
    assert "trainwreck compile --out dist" in workflow
    assert 'name = "acme-rules"' in (pack / "pyproject.toml").read_text()
    assert main(["new", "--pack", "acme-rules", "--root", str(tmp_path)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert main(["new", "--pack", "Bad_Name", "--root", str(tmp_path)]) == 2
    assert main(["new", "--pack", "trainwreck-rules", "--root", str(tmp_path)]) == 2
    assert main(["new", "--root", str(tmp_path)]) == 2
    assert main(["new", "some-id", "--pack", "acme-rules", "--root", str(tmp_path)]) == 2


def test_pack_from_scaffold_to_diagnosis_in_a_fresh_venv(tmp_path, capsys):
    assert main(["new", "--pack", "acme-rules", "--root", str(tmp_path)]) == 0
    pack = tmp_path / "acme-rules"
    # Add a rule the way the pack's README says: scaffold it, then fill it in.
    assert main(["new", "acme-quota", "--root", str(pack)]) == 0
    (pack / "rules" / "acme-quota.yaml").write_text(RULE)
    entry = BASE_ENTRY.read_text().replace("id: base-entry", "id: acme-quota")
    entry = entry.replace("  signal: None.", "  signal: None.\n  rules: [acme-quota]")
    (pack / "entries" / "acme-quota.yaml").write_text(entry)
    (pack / "notebooks" / "acme-quota.ipynb").unlink()  # the entry is not reproducible
    logs = pack / "tests" / "logs" / "acme-quota"
    logs.mkdir(parents=True)
    (logs / "quota.log").write_text("step 10\nacmefs: quota exceeded for project llm-7b\n")
    (logs / "healthy.log").write_text("step 10\nacmefs: 81% of quota used by project llm-7b\n")
    capsys.readouterr()
    assert main(["check", "--root", str(pack)]) == 0, capsys.readouterr().out
    assert main(["compile", "--root", str(pack)]) == 0, capsys.readouterr().err
    private = pack / "dist" / "acme_rules-0.1.0-py3-none-any.whl"  # name and version: pyproject
    assert private.is_file()

    # The public pack, compiled from this checkout with the same functions compile uses.
    bundle, problems = compile_rules(ROOT, run_tests=False)
    assert bundle is not None, [str(p) for p in problems if p.severity == "error"]
    public = write_wheel(bundle, tmp_path / "public", name="trainwreck-rules", version="0.0.1")

    python = core_venv(tmp_path / "fresh", tmp_path / "core-site")
    pip_install(python, trainwreck_wheel(tmp_path / "wheels"), public, private)

    ops = tmp_path / "ops"  # outside any checkout: rules come from the installed packs
    ops.mkdir()
    (ops / "job.log").write_text(
        "[rank3]: step 812\n[rank3]: acmefs: quota exceeded for project llm-70b\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(python), "-m", "trainwreck", "diagnose", "job.log", "--format", "json"],
        cwd=ops,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    [finding] = report["findings"]
    assert finding["entry"] == "acme-quota" and finding["rule"] == "acme-quota"
    assert finding["ranks"] == [3]
    assert finding["url"] == ""  # the scaffold's .invalid placeholder is never printed
    sources = report["stats"]["rule_sources"]
    assert any(s.startswith("package acme-rules (1 rules)") for s in sources), sources
    assert any(s.startswith("package trainwreck-rules (") for s in sources), sources


# --- issue 34: a pack's name must not take over another distribution ---------------------------


def _installed(site: Path, name: str, entry_points: str = "") -> None:
    """A distribution as pip leaves it in site-packages (METADATA, and entry points if any)."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)


@pytest.mark.parametrize(
    "name", ["trainwreck", "numpy", "NumPy", "PyYAML", "google_re2", "nh3", "acme-installed"]
)
def test_a_pack_may_not_take_the_name_of_the_toolkit_a_dependency_or_an_installed_distribution(
    tmp_path, capsys, monkeypatch, name
):
    """A wheel named `numpy` 99.0 would make pip uninstall numpy to install it (audit 4.6)."""
    site = tmp_path / "site"
    _installed(site, "acme-installed")
    monkeypatch.syspath_prepend(str(site))
    repo = make_repo(tmp_path / "repo")
    code = main(["compile", "--root", str(repo), "--no-tests", "--name", name])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"'{name}'" in err and "choose another name" in err
    assert not (repo / "dist").exists()


def test_a_pack_may_take_the_name_of_an_installed_rule_pack(tmp_path, capsys, monkeypatch):
    # Rebuilding a pack that is installed (a new version of it) is the normal case.
    site = tmp_path / "site"
    _installed(site, "acme-rules", "[trainwreck.rules]\nacme-rules = acme_rules:bundle_path\n")
    monkeypatch.syspath_prepend(str(site))
    repo = make_repo(tmp_path / "repo")
    code = main(["compile", "--root", str(repo), "--no-tests", "--name", "acme-rules"])
    assert code == 0, capsys.readouterr().err
    assert list((repo / "dist").glob("acme_rules-*.whl"))


def test_new_pack_refuses_a_dependency_name(tmp_path, capsys):
    assert main(["new", "--pack", "numpy", "--root", str(tmp_path)]) == 2
    assert "choose another name" in capsys.readouterr().err
    assert not (tmp_path / "numpy").exists()
