"""Every rule against its regression logs, and every executed notebook's evidence.

Generic over rules/: a colleague's new rule is tested here automatically.
- each rule file validates (schema, entry, RE2, condition, references);
- each `tests.match` log yields a finding of the rule, each `tests.clean` log does not (the rule
  runs alone, as in `trainwreck compile`);
- for each committed recording (recordings/<id>/ with broken/ and fixed/), all compiled rules
  diagnose broken/ as entry <id> and fixed/ as clean; a recording that is present but does not
  diagnose (no rule for its entry, nothing readable) fails, never skips. Evidence of notebooks
  executed in a session is checked by tests/test_notebooks.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainwreck.compile.bundle import entry_summaries
from trainwreck.compile.packs import RuleSet, compile_folder
from trainwreck.diagnose import UsageError, diagnose
from trainwreck.knowledge import KnowledgeBase
from trainwreck.rules.model import rule_files

ROOT = Path(__file__).resolve().parents[1]
KB = KnowledgeBase.load(ROOT)
LOADED = KB.rules
RULES = {rule["id"]: rule for rule in LOADED.rules}
ENTRIES = entry_summaries(ROOT, entries=KB.entries)


def _cases() -> list:
    cases = []
    for rule in LOADED.rules:
        for kind in ("match", "clean"):
            for path in rule["tests"][kind]:
                cases.append(
                    pytest.param(
                        rule["id"], kind, path, id=f"{rule['id']}:{kind}:{Path(path).name}"
                    )
                )
    return cases


@pytest.mark.parametrize("path", rule_files(ROOT / "rules"), ids=lambda p: p.name)
def test_rule_file_is_valid(path):
    problems = [
        str(p) for p in LOADED.problems if p.file == f"rules/{path.name}" and p.severity == "error"
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("rule_id", "kind", "log"), _cases())
def test_rule_regression_log(rule_id, kind, log):
    rule = RULES[rule_id]
    path = ROOT / log
    assert path.exists(), f"{rule['source']}: regression log {log} does not exist"
    report = diagnose([str(path)], ROOT, rule_set=RuleSet(rules=[rule], entries=ENTRIES))
    fired = rule_id in report.rules
    if kind == "match":
        assert fired, f"{rule_id} did not fire on {log}"
        finding = report.findings[0]
        assert finding.entry == rule["entry"]
        assert finding.evidence, "a finding must show evidence lines"
        for item in finding.evidence:
            assert item.line >= 1 and item.file
    else:
        evidence = report.findings[0].evidence[:2] if report.findings else []
        assert not fired, f"{rule_id} fired on clean log {log}: {evidence}"


def recordings(base: Path) -> list[Path]:
    """The recordings under `base`: folders with both a broken/ and a fixed/ run."""
    if not base.is_dir():
        return []
    return [
        folder
        for folder in sorted(base.iterdir())
        if (folder / "broken").is_dir() and (folder / "fixed").is_dir()
    ]


def _evidence_dirs() -> list:
    return [pytest.param(f, id=f"recordings/{f.name}") for f in recordings(ROOT / "recordings")]


EVIDENCE = _evidence_dirs()


@pytest.fixture(scope="module")
def all_rules() -> RuleSet:
    bundle, _ = compile_folder(ROOT, cache=False, source=KB)
    rule_set = RuleSet()
    rule_set.add(bundle)
    return rule_set


def check_recording(folder: Path, rule_set: RuleSet, root: Path = ROOT) -> None:
    """broken/ is diagnosed as the folder's entry and fixed/ is clean; AssertionError otherwise
    (a recording with no rule for its entry, or nothing readable in it, does not diagnose)."""
    entry = folder.name
    assert any(rule["entry"] == entry for rule in rule_set.rules), (
        f"{folder}: no rule diagnoses entry {entry}; a committed recording must be diagnosed"
    )
    try:
        broken = diagnose([str(folder / "broken")], root, rule_set=rule_set)
        fixed = diagnose([str(folder / "fixed")], root, rule_set=rule_set)
    except UsageError as exc:
        raise AssertionError(f"{folder}: {exc}") from None
    assert entry in broken.entries, f"{folder}/broken: expected {entry}, found {broken.entries}"
    assert fixed.entries == [], f"{folder}/fixed should be clean, found {fixed.entries}"


@pytest.mark.skipif(
    not EVIDENCE, reason="no GPU recording committed yet (recordings/<id>/broken, fixed)"
)
@pytest.mark.parametrize("folder", EVIDENCE or [None])
def test_notebook_evidence_broken_is_diagnosed_and_fixed_is_clean(folder, all_rules):
    check_recording(folder, all_rules)


def _recording(root: Path, entry: str, broken: Path, fixed: Path) -> Path:
    """recordings/<entry>/ with copies of two logs (files or folders) as its runs."""
    folder = root / "recordings" / entry
    for run, source in (("broken", broken), ("fixed", fixed)):
        if source.is_dir():
            shutil.copytree(source, folder / run)
        else:
            (folder / run).mkdir(parents=True)
            shutil.copy(source, folder / run / source.name)
    return folder


def test_a_recording_that_does_not_diagnose_fails_not_skips(tmp_path, all_rules):
    rule = RULES["cuda-oom-capacity-oom"]
    failing = ROOT / rule["tests"]["match"][0]
    healthy = tmp_path / "healthy.log"
    healthy.write_text("".join(f"step {n} loss {3 - n / 100:.2f}\n" for n in range(50)))
    # no rule for the entry the folder is named after
    orphan = _recording(tmp_path / "a", "no-such-entry", failing, healthy)
    with pytest.raises(AssertionError, match="no rule diagnoses entry no-such-entry"):
        check_recording(orphan, all_rules)
    # a rule exists, but the broken run does not show the failure
    quiet = _recording(tmp_path / "b", rule["entry"], healthy, healthy)
    with pytest.raises(AssertionError, match="/broken: expected"):
        check_recording(quiet, all_rules)
    # a fixed run that still fails
    still = _recording(tmp_path / "c", rule["entry"], failing, failing)
    with pytest.raises(AssertionError, match="/fixed should be clean"):
        check_recording(still, all_rules)
    # and a recording that does diagnose passes
    check_recording(_recording(tmp_path / "d", rule["entry"], failing, healthy), all_rules)
