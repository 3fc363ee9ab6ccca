"""`trainwreck review`: a scratch git repository with a planted change, reviewed against main."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trainwreck.cli import main
from trainwreck.review import MARKER, review_change

REPO = Path(__file__).resolve().parents[1]
BASE_ENTRY = REPO / "tests" / "check_cases" / "base-entry.yaml"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

RULE = """# yaml-language-server: $schema=../schemas/rule.schema.json
id: {rule_id}
entry: {entry}
title: {entry} line
description: The demo library prints this line when {entry} happens.
confidence: {confidence}
matchers:
  line:
    regex: '{regex}'
condition: line
tests:
  match: [tests/logs/{entry}/broken.log]
  clean: [tests/logs/{entry}/healthy.log]
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def add_failure(
    root: Path, entry: str, regex: str, broken: str, *, confidence: float = 0.6, rule: str = ""
) -> None:
    """An entry (the valid fixture with its id and title), one rule and its two logs."""
    text = BASE_ENTRY.read_text().replace("id: base-entry", f"id: {entry}")
    text = text.replace(
        "title: A minimal valid entry used as the base of the malformed cases",
        f"title: The {entry} failure",
    )
    (root / "entries" / f"{entry}.yaml").write_text(text)
    rule_id = rule or f"{entry}-line"
    (root / "rules" / f"{rule_id}.yaml").write_text(
        RULE.format(rule_id=rule_id, entry=entry, confidence=confidence, regex=regex)
    )
    logs = root / "tests" / "logs" / entry
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "broken.log").write_text(f"step 1 ok\n{broken}\nstep 2 ok\n")
    (logs / "healthy.log").write_text("step 1 ok\nstep 2 ok\n")


def scratch_repo(root: Path) -> Path:
    """main: one entry `alpha` with its rule and logs; then a branch `change` is checked out."""
    for folder in ("entries", "rules"):
        (root / folder).mkdir(parents=True)
    shutil.copytree(REPO / "schemas", root / "schemas")
    (root / "mkdocs.yml").write_text("site_name: Demo\nsite_url: https://kb.trainwreck-demo.net/\n")
    add_failure(root, "alpha", r"AlphaError: widget \w+ failed", "AlphaError: widget x failed")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "checkout", "-q", "-b", "change")
    return root


def plant_new_rule_and_edited_entry(root: Path) -> None:
    add_failure(root, "gamma", r"GammaError: (?P<n>\d+) gizmos lost", "GammaError: 3 gizmos lost")
    alpha = root / "entries" / "alpha.yaml"
    alpha.write_text(alpha.read_text().replace("The alpha failure", "The alpha failure, retold"))


def plant_rule_that_steals_alpha_log(root: Path) -> None:
    # beta's rule also matches alpha's line, more confidently: alpha's log would now be
    # diagnosed as beta first. The rule passes its own regression logs.
    add_failure(
        root,
        "beta",
        r"widget \w+ failed",
        "BetaWarning: widget y failed",
        confidence=0.9,
        rule="beta-broad",
    )


def test_review_reports_each_planted_change_and_exits_1(tmp_path, capsys):
    root = scratch_repo(tmp_path / "kb")
    plant_new_rule_and_edited_entry(root)
    plant_rule_that_steals_alpha_log(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "change")

    review = review_change(root, "main")
    entries = {e.id: (e.change, len(e.errors)) for e in review.entries}
    assert entries == {"alpha": ("changed", 0), "beta": ("added", 0), "gamma": ("added", 0)}
    rules = {r.id: (r.change, r.passes) for r in review.rules}
    assert rules["gamma-line"] == ("added", True)
    assert rules["beta-broad"] == ("added", True)
    assert rules["alpha-line"] == ("entry-changed", True)
    deltas = {d.path: d for d in review.logs}
    alpha_log = deltas["tests/logs/alpha/broken.log"]
    assert alpha_log.base == ["alpha"] and alpha_log.head == ["beta", "alpha"]
    assert alpha_log.first_changed and alpha_log.gained == ["beta"]
    assert alpha_log.broken == [
        "its entry `alpha` was the first finding on the base; now `beta` is"
    ]
    assert deltas["tests/logs/gamma/broken.log"].base is None  # a new log, not a break
    assert not deltas["tests/logs/gamma/broken.log"].broken
    assert review.broken == [f"log `tests/logs/alpha/broken.log`: {alpha_log.broken[0]}"]
    assert "`https://kb.trainwreck-demo.net/entries/gamma/` : entry page (added)" in review.pages

    code = main(["review", "--root", str(root), "--base", "main"])
    captured = capsys.readouterr()
    assert code == 1
    text = captured.out
    assert text.startswith(MARKER + "\n## Trainwreck review: 1 verdict(s) broken")
    assert "| `gamma-line` | `gamma` | added | passes its 2 regression log(s) |" in text
    assert "| `alpha` | changed | passes |" in text
    assert (
        "| `tests/logs/alpha/broken.log` | `match alpha` | `alpha` | `beta`, `alpha` "
        "| **broken**: its entry `alpha` was the first finding on the base; now `beta` is |"
    ) in text
    assert "broken: log `tests/logs/alpha/broken.log`" in captured.err


def test_review_without_the_breaking_rule_exits_0(tmp_path, capsys):
    root = scratch_repo(tmp_path / "kb")
    plant_new_rule_and_edited_entry(root)  # left uncommitted: the working tree is reviewed
    assert main(["review", "--root", str(root), "--base", "main"]) == 0
    text = capsys.readouterr().out
    assert "## Trainwreck review: no verdict broken" in text
    assert (
        "| `tests/logs/gamma/broken.log` | `match gamma` | (no such log) | `gamma` | new log |"
        in text
    )
    assert "tests/logs/alpha/broken.log" not in text  # its diagnosis did not change


def test_review_reports_a_rule_failing_its_own_logs_and_a_check_error(tmp_path, capsys):
    root = scratch_repo(tmp_path / "kb")
    rule = root / "rules" / "alpha-line.yaml"
    rule.write_text(rule.read_text().replace(r"AlphaError: widget \w+ failed", r"step \d ok"))
    alpha = root / "entries" / "alpha.yaml"
    alpha.write_text(alpha.read_text().replace("severity: medium", "severity: huge"))
    review = review_change(root, "main")
    [result] = [r for r in review.rules if r.id == "alpha-line"]
    assert result.change == "changed" and not result.broken_on_base
    assert any(
        "rule fired on clean log 'tests/logs/alpha/healthy.log'" in p.message
        for p in result.problems
    )
    [entry] = review.entries
    assert entry.id == "alpha" and [p.path for p in entry.errors] == ["severity"]
    assert main(["review", "--root", str(root), "--base", "main"]) == 1
    text = capsys.readouterr().out
    assert "| `alpha-line` | `alpha` | changed | **fails**: 1 problem(s) |" in text
    assert "| `alpha` | changed | **1 error(s)** |" in text


def test_review_usage_errors_exit_2(tmp_path, capsys):
    root = scratch_repo(tmp_path / "kb")
    assert main(["review", "--root", str(root), "--base", "no-such-branch"]) == 2
    assert "trainwreck review: 'no-such-branch' names no commit" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["review", "--root", str(plain)]) == 2
    assert capsys.readouterr().err.startswith("trainwreck review: ")


def test_review_reports_notebook_changes_and_a_failed_run(tmp_path, capsys):
    import json

    from trainwreck.reproduce import source_hash
    from trainwreck.scaffold import notebook_json

    root = tmp_path / "kb"
    for folder in ("entries", "rules", "notebooks"):
        (root / folder).mkdir(parents=True)
    shutil.copytree(REPO / "schemas", root / "schemas")
    text = BASE_ENTRY.read_text().replace("id: base-entry", "id: delta")
    text = text.replace(
        "reproduction:\n  not_reproducible: It is a test fixture, not a failure.",
        "reproduction:\n  notebook: notebooks/delta.ipynb\n  device: cpu",
    )
    (root / "entries" / "delta.yaml").write_text(text)
    notebook = notebook_json("delta")
    path = root / "notebooks" / "delta.ipynb"
    path.write_text(json.dumps(notebook))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")

    notebook["cells"][0]["source"] = "# Delta\n\nBetter words."  # markdown: prose only
    path.write_text(json.dumps(notebook))
    [result] = review_change(root, "main").notebooks
    assert (result.change, result.code_changed, result.kind) == ("changed", False, "not-run")

    notebook["cells"][2]["source"] += "\nprint('more code')"
    path.write_text(json.dumps(notebook))
    reproduction = {"notebook": "notebooks/delta.ipynb", "device": "cpu"}
    record = {
        "id": "delta",
        "status": "failed",
        "source_hash": source_hash(notebook, reproduction, "ci"),
        "started": "2026-11-30T12:00:00+00:00",
        "error": {"cell": 4, "message": "NotImplementedError: TODO"},
    }
    (root / "build").mkdir()
    (root / "build" / "manifest.json").write_text(json.dumps({"notebooks": [record]}))
    [result] = review_change(root, "main").notebooks
    assert (result.change, result.code_changed, result.kind) == ("changed", True, "failed")
    assert main(["review", "--root", str(root), "--base", "main"]) == 1
    text = capsys.readouterr().out
    assert "| `delta` | changed (code) | **`Failed: the last run, on 2026-11-30" in text
    # no site address configured: the page is named by its path, never by a made-up domain
    assert "- `entries/delta/` : entry page (reproduction)" in text


def test_the_base_tree_holds_no_link_out_of_it(tmp_path):
    from trainwreck.review import base_tree, resolve_ref

    root = scratch_repo(tmp_path / "kb")
    (root / "tests" / "logs" / "alpha" / "link.log").symlink_to("/etc/hostname")
    (root / "unrelated.bin").write_bytes(b"\0" * 1000)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "link")
    with base_tree(root, resolve_ref(root, "HEAD")) as base:
        assert (base / "tests" / "logs" / "alpha" / "broken.log").is_file()
        assert not (base / "tests" / "logs" / "alpha" / "link.log").exists()
        assert not (base / "unrelated.bin").exists()  # only the knowledge base is read
    assert not base.exists()


def test_review_of_a_knowledge_base_in_a_subfolder_against_origin_main(tmp_path, capsys):
    """--root inside a larger repository, and a clone that has origin/main but no main."""
    origin = tmp_path / "origin"
    kb = scratch_repo(origin / "kb")  # then made a folder of a larger repository:
    shutil.rmtree(kb / ".git")
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "base")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "checkout", "-q", "-b", "change")
    git(clone, "branch", "-q", "-D", "main")
    plant_rule_that_steals_alpha_log(clone / "kb")
    assert main(["review", "--root", str(clone / "kb")]) == 1
    text = capsys.readouterr().out
    assert "| `beta-broad` | `beta` | added | passes its 2 regression log(s) |" in text
    assert "**broken**: its entry `alpha` was the first finding on the base; now `beta` is" in text


def test_contributed_names_cannot_break_out_of_the_markdown(tmp_path, capsys):
    root = scratch_repo(tmp_path / "kb")
    (root / "entries" / "x|`<img src=y>`.yaml").write_text("id: [unclosed\n")
    assert main(["review", "--root", str(root)]) == 1
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("| `` x"))
    assert row == "| `` x\\|`<img src=y>` `` | added | **1 error(s)** |"  # the name, as code


def test_a_log_one_rule_of_an_entry_matches_is_not_clean_for_that_entry(tmp_path):
    from trainwreck.review import _expectations

    root = scratch_repo(tmp_path / "kb")
    other = (
        (root / "rules" / "alpha-line.yaml")
        .read_text()
        .replace("id: alpha-line", "id: alpha-other")
    )
    other = other.replace(
        "match: [tests/logs/alpha/broken.log]", "match: [tests/logs/alpha/other.log]"
    )
    other = other.replace(
        "clean: [tests/logs/alpha/healthy.log]", "clean: [tests/logs/alpha/broken.log]"
    )
    (root / "rules" / "alpha-other.yaml").write_text(other)
    expect = _expectations(root)
    assert expect["tests/logs/alpha/broken.log"] == [("match", "alpha")]
    assert expect["tests/logs/alpha/healthy.log"] == [("clean", "alpha")]


def test_pull_request_file_names_cannot_forge_the_review_comment(tmp_path, capsys):
    """Audit 2.1: "Pages affected" printed raw file stems: headings, HTML and a fake approval
    in the bot's comment."""
    root = scratch_repo(tmp_path / "kb")
    (root / "docs").mkdir()
    for name in (
        'evil\n## INJECTED HEADING <img src="https:evil.example"> [click me](https:evil.example)',
        "<img src=x onerror=alert(1)>",
        "bidi-\u202egnp.md",
    ):
        (root / "docs" / f"{name}.md").write_text("# page\n")
    (
        root / "entries" / "zz\n- **APPROVED by maintainers** [merge](https:evil.example).yaml"
    ).write_text("id: zz\n")
    assert main(["review", "--root", str(root)]) == 1
    text = capsys.readouterr().out
    prose = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)
    assert "<img" not in prose and "](" not in prose and "**APPROVED" not in prose, prose
    assert "\u202e" not in text
    lines = prose.splitlines()
    assert not any(line.startswith("## INJECTED") or "APPROVED" in line for line in lines)
    pages = text.split("### Pages affected", 1)[1]
    assert "INJECTED HEADING" in pages and "\\x0a" in pages  # shown, as code


def test_a_failed_notebook_message_cannot_put_markup_or_mentions_in_the_comment(tmp_path, capsys):
    """Audit 2.2: an exception message went raw into "Broken verdicts" and the notebook table:
    a remote image, fake bold text, a link and an @mention from the bot's account."""
    import json

    from trainwreck.reproduce import source_hash
    from trainwreck.scaffold import notebook_json

    root = tmp_path / "kb"
    for folder in ("entries", "rules", "notebooks"):
        (root / folder).mkdir(parents=True)
    shutil.copytree(REPO / "schemas", root / "schemas")
    text = BASE_ENTRY.read_text().replace("id: base-entry", "id: delta")
    text = text.replace(
        "reproduction:\n  not_reproducible: It is a test fixture, not a failure.",
        "reproduction:\n  notebook: notebooks/delta.ipynb\n  device: cpu",
    )
    (root / "entries" / "delta.yaml").write_text(text)
    notebook = notebook_json("delta")
    path = root / "notebooks" / "delta.ipynb"
    path.write_text(json.dumps(notebook))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    notebook["cells"][2]["source"] += "\nprint('more code')"
    path.write_text(json.dumps(notebook))
    reproduction = {"notebook": "notebooks/delta.ipynb", "device": "cpu"}
    message = (
        'RuntimeError: <img src="https://evil.example/p.png"> **all verdicts pass** '
        "[merge now](https://evil.example) | col | @octocat"
    )
    record = {
        "id": "delta",
        "status": "failed",
        "source_hash": source_hash(notebook, reproduction, "ci"),
        "started": "2026-11-30T12:00:00+00:00",
        "error": {"cell": 4, "message": message},
    }
    (root / "build").mkdir()
    (root / "build" / "manifest.json").write_text(json.dumps({"notebooks": [record]}))
    assert main(["review", "--root", str(root), "--base", "main"]) == 1
    out = capsys.readouterr().out
    prose = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", out)
    assert "@octocat" in out and "@octocat" not in prose  # only inside code: no mention
    assert "<img" not in prose and "](" not in prose and "all verdicts pass" not in prose, prose
    row = next(line for line in out.splitlines() if line.startswith("| `delta`"))
    assert row.count(" | ") == 2, row  # the message's "|" did not add a column
