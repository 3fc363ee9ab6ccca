"""Every rule against its regression logs, and every executed notebook's evidence.

Generic over rules/: a colleague's new rule is tested here automatically.
- each rule file validates (schema, entry, RE2, condition, references);
- each `tests.match` log yields a finding of the rule, each `tests.clean` log does not (the rule
  runs alone, as in `trainwreck compile`);
- for each executed notebook's evidence (build/evidence/<id>/ or recordings/<id>/ with broken/ and
  fixed/), all compiled rules diagnose broken/ as entry <id> and fixed/ as clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainwreck.diagnose import UsageError, diagnose
from trainwreck.rules.bundle import RuleSet, compile_folder, entry_summaries
from trainwreck.rules.model import load_rules, rule_files

ROOT = Path(__file__).resolve().parents[1]
LOADED = load_rules(ROOT)
RULES = {rule["id"]: rule for rule in LOADED.rules}
ENTRIES = entry_summaries(ROOT)


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


def _evidence_dirs() -> list:
    # Evidence of notebooks executed in this session is checked by tests/test_notebooks.py
    # (after the session fixture runs them); here: the committed GPU recordings.
    found = []
    for base in (ROOT / "recordings",):
        if not base.is_dir():
            continue
        for folder in sorted(base.iterdir()):
            if (folder / "broken").is_dir() and (folder / "fixed").is_dir():
                found.append(pytest.param(folder, id=f"{base.name}/{folder.name}"))
    return found


EVIDENCE = _evidence_dirs()


@pytest.fixture(scope="module")
def all_rules() -> RuleSet:
    bundle, _ = compile_folder(ROOT, cache=False)
    rule_set = RuleSet()
    rule_set.add(bundle)
    return rule_set


@pytest.mark.skipif(
    not EVIDENCE, reason="no GPU recording committed yet (recordings/<id>/broken, fixed)"
)
@pytest.mark.parametrize("folder", EVIDENCE or [None])
def test_notebook_evidence_broken_is_diagnosed_and_fixed_is_clean(folder, all_rules):
    entry = folder.name
    if not any(rule["entry"] == entry for rule in all_rules.rules):
        pytest.skip(f"no rule for entry {entry} yet")
    try:
        broken = diagnose([str(folder / "broken")], ROOT, rule_set=all_rules)
        fixed = diagnose([str(folder / "fixed")], ROOT, rule_set=all_rules)
    except UsageError:  # the notebook is being re-executed right now
        pytest.skip(f"{folder} changed while reading")
    assert entry in broken.entries, f"{folder}/broken: expected {entry}, found {broken.entries}"
    assert fixed.entries == [], f"{folder}/fixed should be clean, found {fixed.entries}"
