"""The knowledge base: read once, the relation vocabulary in one place, entry <-> rule links."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainwreck import model
from trainwreck.check import RECIPROCAL, check_entries
from trainwreck.compile.command import compile_rules
from trainwreck.knowledge import KnowledgeBase
from trainwreck.knowledge import relations as rel
from trainwreck.knowledge.links import RuleLink, entry_side_problems, rule_side_problems

REPO = Path(__file__).resolve().parents[1]


def test_relation_kinds_are_the_schemas_enum():
    schema = json.loads((REPO / "schemas" / "entry.schema.json").read_text())
    enum = schema["properties"]["related"]["items"]["properties"]["relation"]["enum"]
    assert list(rel.RELATIONS) == enum


def test_inverses_pair_up_and_mutual_means_declared_back():
    for kind, relation in rel.RELATIONS.items():
        assert relation.inverse in rel.RELATIONS
        assert rel.RELATIONS[relation.inverse].inverse == kind
        # a mutual relation's inverse is mutual too, and so is causality
        assert rel.RELATIONS[relation.inverse].mutual == relation.mutual
        assert rel.RELATIONS[relation.inverse].causal == relation.causal
    assert RECIPROCAL == {
        "co-occurs": "co-occurs",
        "confused-with": "confused-with",
        "causes": "caused-by",
        "caused-by": "causes",
    }
    assert rel.inverse_of("see-also") == "see-also"
    assert rel.inverse_of("cousin-of") == rel.FALLBACK


def test_causes_reads_either_side():
    entries = {
        "a": {"related": [{"id": "b", "relation": "causes"}, {"id": "c", "relation": "see-also"}]},
        "c": {"related": [{"id": "d", "relation": "caused-by"}]},
        "d": {"related": "not a list"},
    }
    assert rel.causes(entries, "a", "b")
    assert not rel.causes(entries, "b", "a")
    assert rel.causes(entries, "d", "c")  # declared only by c, as caused-by d
    assert not rel.causes(entries, "a", "c")
    assert rel.declared(entries, "a", "c") == "see-also"
    assert rel.declared(entries, "d", "a") is None
    assert rel.declared(entries, "x", "a") is None


def _tiny_repo(tmp_path: Path) -> Path:
    """Two entries of the repository and the rules that name them."""
    root = tmp_path / "repo"
    for folder in ("entries", "rules", "schemas", "notebooks"):
        (root / folder).mkdir(parents=True)
    for name in ("entry.schema.json", "rule.schema.json"):
        shutil.copy(REPO / "schemas" / name, root / "schemas" / name)
    return root


def _entry(root: Path, entry_id: str, rules: list[str]) -> None:
    text = f"id: {entry_id}\ntitle: T\nfingerprint:\n  rules: {json.dumps(rules)}\n"
    (root / "entries" / f"{entry_id}.yaml").write_text(text)


def test_each_file_is_read_once_and_only_when_needed(tmp_path, monkeypatch):
    root = _tiny_repo(tmp_path)
    _entry(root, "one", ["r1"])
    _entry(root, "two", [])
    (root / "entries" / "broken.yaml").write_text("id: [unclosed\n")
    (root / "rules" / "r1.yaml").write_text("id: r1\nentry: one\n")
    (root / "notebooks" / "one.ipynb").write_text("{}")
    reads: list[str] = []
    real = model.read_text

    def counting(path, display, **kwargs):
        reads.append(display)
        return real(path, display, **kwargs)

    monkeypatch.setattr(model, "read_text", counting)
    kb = KnowledgeBase.load(root)
    assert reads == []  # nothing is read before it is asked for
    assert [e.id for e in kb.entries] == ["one", "two"]
    assert [p.file for p in kb.entry_problems] == ["entries/broken.yaml"]
    assert kb.entry("one") is kb.entry_at(root / "entries" / "one.yaml")
    assert kb.rule_links["r1"].entry == "one"
    assert kb.notebooks == {"one": root / "notebooks" / "one.ipynb"}
    _ = kb.entries, kb.rule_links, kb.entry_problems
    assert sorted(reads) == sorted(
        ["entries/broken.yaml", "entries/one.yaml", "entries/two.yaml", "rules/r1.yaml"]
    )
    with pytest.raises(model.DocumentError):
        kb.entry_at(root / "entries" / "broken.yaml")
    assert reads.count("entries/broken.yaml") == 1


def test_entry_and_rule_sides_of_one_link(tmp_path):
    root = _tiny_repo(tmp_path)
    _entry(root, "one", ["r1", "r2", "missing"])
    _entry(root, "two", [])
    (root / "rules" / "r1.yaml").write_text("id: r1\nentry: one\n")
    (root / "rules" / "r2.yaml").write_text("id: r2\nentry: two\n")
    kb = KnowledgeBase.load(root)
    entry_side = [p.message for p in entry_side_problems(kb.entries, kb.rule_links)]
    assert entry_side == [
        "rule 'r2' diagnoses 'two', not this entry",
        "rule 'missing' does not exist in rules/",
    ]
    rule_side = rule_side_problems(list(kb.rule_links.values()), kb.by_id)
    assert [(p.file, p.line, p.severity, p.message) for p in rule_side] == [
        ("rules/r2.yaml", 2, "warning", "entry 'two' does not list this rule in fingerprint.rules")
    ]
    # check reports the entry side at the entry's line
    problems, _ = check_entries(root, [root / "entries" / "one.yaml"], kb)
    found = {(p.file, p.line, p.path, p.message) for p in problems}
    where = ("entries/one.yaml", 4, "fingerprint.rules[1]")
    assert (*where, "rule 'r2' diagnoses 'two', not this entry") in found


def test_rule_link_of_a_rule_with_no_entry_is_none(tmp_path):
    root = _tiny_repo(tmp_path)
    (root / "rules" / "r1.yaml").write_text("id: r1\nentry: [1]\n")
    (root / "rules" / "bad.yaml").write_text("id: [\n")
    kb = KnowledgeBase.load(root)
    assert set(kb.rule_links) == {"r1"}
    assert isinstance(kb.rule_links["r1"], RuleLink) and kb.rule_links["r1"].entry is None


def test_compile_warns_about_an_unlisted_rule_of_the_repository():
    """The repository's own rules: compile's rule side agrees with check's entry side."""
    kb = KnowledgeBase.load(REPO)
    bundle, problems = compile_rules(REPO, run_tests=False, kb=kb)
    assert bundle is not None
    unlisted = {p.file for p in problems if "does not list this rule" in p.message}
    listed_by_entries = {
        rule_id
        for entry in kb.entries
        for rule_id in ((entry.data.get("fingerprint") or {}).get("rules") or [])
    }
    expected = {
        link.document.file for link in kb.validated_rule_links() if link.id not in listed_by_entries
    }
    assert unlisted == expected
