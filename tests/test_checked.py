"""The `checked` block: an entry edited after its claim-by-claim check is told apart from one
checked as it stands, and a check's record must hold together."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.test_check import make_repo
from trainwreck.check import check_entries
from trainwreck.knowledge.checked import content_digest

BLOCK = """checked:
  date: '2026-12-01'
  by: a reviewer who did not write it
  ledger: docs/audits/base-entry.md
  claims: {{checked: 3, held: 2, corrected: 1, unconfirmed: 0}}
  against:
    - the JSON Schema 2020-12 core specification
  digest: {digest}
"""


def checked_repo(tmp_path: Path, *, digest: str | None = None, ledger: bool = True) -> Path:
    root = make_repo(tmp_path)
    path = root / "entries" / "base-entry.yaml"
    data = yaml.safe_load(path.read_text())
    text = path.read_text() + BLOCK.format(digest=digest or content_digest(data))
    path.write_text(text.replace("status: draft", "status: reviewed"))
    if ledger:
        (root / "docs" / "audits").mkdir(parents=True)
        (root / "docs" / "audits" / "base-entry.md").write_text("# Audit: base-entry\n")
    return root


def problems_of(root: Path) -> list[str]:
    problems, _ = check_entries(root, [root / "entries" / "base-entry.yaml"])
    return [str(p) for p in problems]


def test_an_entry_checked_as_it_stands_is_clean(tmp_path: Path) -> None:
    assert problems_of(checked_repo(tmp_path)) == []


def test_an_entry_edited_after_its_check_warns_at_the_digest_with_the_new_one(
    tmp_path: Path,
) -> None:
    root = checked_repo(tmp_path)
    path = root / "entries" / "base-entry.yaml"
    path.write_text(path.read_text().replace("nothing to fix.", "nothing at all to fix."))
    new = content_digest(yaml.safe_load(path.read_text()))
    (problem,) = problems_of(root)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "digest:" in t)
    assert problem.startswith(f"entries/base-entry.yaml:{line}:11: warning: checked.digest: ")
    assert "changed after it was checked on 2026-12-01" in problem
    assert problem.endswith(f"set digest: {new}")


def test_the_fields_an_audit_writes_do_not_change_the_digest() -> None:
    data = {"id": "x", "summary": "s", "status": "draft", "updated": "2026-11-30"}
    audited = {
        **data,
        "status": "reviewed",
        "updated": "2026-12-01",
        "checked": {"by": "r"},
        "related": [{"id": "y", "relation": "see-also", "note": "added by y's author"}],
    }
    assert content_digest(data) == content_digest(audited)
    assert content_digest(data) != content_digest({**data, "summary": "t"})


def test_a_missing_ledger_and_totals_that_do_not_add_up_are_errors(tmp_path: Path) -> None:
    root = checked_repo(tmp_path, ledger=False)
    path = root / "entries" / "base-entry.yaml"
    path.write_text(path.read_text().replace("held: 2", "held: 1"))
    problems = problems_of(root)
    assert any("checked.ledger: no ledger file docs/audits/base-entry.md" in p for p in problems)
    assert any(
        "checked.claims: held + corrected + unconfirmed is 2, not the 3 claims checked" in p
        for p in problems
    )


def test_reviewed_without_a_check_is_a_warning(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    path = root / "entries" / "base-entry.yaml"
    path.write_text(path.read_text().replace("status: draft", "status: reviewed"))
    (problem,) = problems_of(root)
    assert "warning: status: status 'reviewed' needs a checked block" in problem


def test_a_malformed_digest_is_a_schema_error(tmp_path: Path) -> None:
    root = checked_repo(tmp_path, digest="not-hex")
    assert any("checked.digest: 'not-hex' does not match" in p for p in problems_of(root))


def test_require_checked_warns_only_when_asked_and_only_without_a_block(
    tmp_path: Path, capsys
) -> None:
    from trainwreck.cli import main

    root = make_repo(tmp_path)
    target = root / "entries" / "base-entry.yaml"
    problems, _ = check_entries(root, [target])
    assert not any("no checked block" in str(p) for p in problems)
    (problem,) = [
        p for p in check_entries(root, [target], require_checked=True)[0] if "checked" in str(p)
    ]
    assert str(problem).startswith("entries/base-entry.yaml:2:")
    assert "warning: id: no checked block" in str(problem)
    assert main(["check", "--root", str(root), "--require-checked"]) == 0  # a warning, not an error
    assert "no checked block" in capsys.readouterr().out

    checked = checked_repo(tmp_path / "checked")
    entry = checked / "entries" / "base-entry.yaml"
    assert problems_of(checked) == []
    assert check_entries(checked, [entry], require_checked=True)[0] == []
