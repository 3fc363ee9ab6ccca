"""Comparing the two sides of a review: entries, rules, the diagnosis of every log, notebooks and
the pages they affect."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from trainwreck.errors import UsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.model import Entry, Problem
from trainwreck.review.base import base_tree, resolve_ref
from trainwreck.review.model import (
    Change,
    EntryResult,
    FileChange,
    LogDelta,
    NotebookResult,
    Review,
    RuleResult,
)
from trainwreck.review.text import _code

_FILE_CHANGES = (Change.ADDED, Change.CHANGED, Change.REMOVED)  # a rule file's own change


def changed_files(base: Path, head: Path, folder: str, pattern: str) -> list[FileChange]:
    """Files matching `pattern` in `folder` added, changed (by content) or removed."""
    old = {p.name: p for p in sorted((base / folder).glob(pattern)) if p.is_file()}
    new = {p.name: p for p in sorted((head / folder).glob(pattern)) if p.is_file()}
    changes = []
    for name in sorted(set(old) | set(new)):
        path = f"{folder}/{name}"
        if name not in old:
            changes.append(FileChange(path, Change.ADDED))
        elif name not in new:
            changes.append(FileChange(path, Change.REMOVED))
        elif old[name].read_bytes() != new[name].read_bytes():
            changes.append(FileChange(path, Change.CHANGED))
    return changes


def _tree_differs(base: Path, head: Path, relative: str) -> bool:
    """Whether a log file or folder differs between the sides (content of every file)."""

    def listing(root: Path) -> dict[str, bytes] | None:
        target = root / relative
        if target.is_file():
            return {"": target.read_bytes()}
        if target.is_dir():
            return {
                p.relative_to(target).as_posix(): p.read_bytes()
                for p in sorted(target.rglob("*"))
                if p.is_file()
            }
        return None

    return listing(base) != listing(head)


def _problem_key(problem: Problem) -> tuple[str, str, str, str]:
    # Line numbers shift with unrelated edits; a problem is "the same" by file, path and message.
    return (problem.file, problem.path, problem.message, problem.severity)


def review_entries(
    base_kb: KnowledgeBase, head_kb: KnowledgeBase, review: Review
) -> list[FileChange]:
    from trainwreck.check import check_entries

    changes = changed_files(base_kb.root, head_kb.root, "entries", "*.yaml")
    head_problems, _ = check_entries(head_kb.root, head_kb.entry_files, head_kb)
    base_problems, _ = check_entries(base_kb.root, base_kb.entry_files, base_kb)
    known = {_problem_key(p) for p in base_problems}
    touched = {c.path for c in changes}
    for change in changes:
        result = EntryResult(change.stem, change.change)
        if change.change != Change.REMOVED:
            mine = [p for p in head_problems if p.file == change.path]
            result.errors = [p for p in mine if p.severity == "error"]
            result.warnings = [p for p in mine if p.severity != "error"]
        review.entries.append(result)
    # Errors the change causes in entries it did not touch (a removed entry others link to).
    review.other_check_errors = [
        p
        for p in head_problems
        if p.severity == "error" and p.file not in touched and _problem_key(p) not in known
    ]
    return changes


def _rule_logs(rule: dict[str, Any]) -> list[str]:
    return [*rule["tests"]["match"], *rule["tests"]["clean"]]


def _regression_problems(kb: KnowledgeBase, rule_path: str, rule_id: str | None) -> list[Problem]:
    """Validation problems of one rule file plus its regression verdict, as compile judges it."""
    from trainwreck.compile.regression import run_rule_tests

    loaded = kb.rules
    problems = [p for p in loaded.problems if p.file == rule_path and p.severity == "error"]
    rule = next((r for r in loaded.rules if r["id"] == rule_id), None)
    if rule is not None:
        tested = run_rule_tests(rule, kb.root, loaded.documents.get(rule_id))
        problems += [p for p in tested if p.severity == "error"]
    return sorted(problems)


def review_rules(
    base_kb: KnowledgeBase, head_kb: KnowledgeBase, review: Review, entry_changes: list[FileChange]
) -> None:
    from trainwreck.compile.regression import run_rule_tests

    base, head = base_kb.root, head_kb.root
    head_loaded = head_kb.rules
    base_loaded = base_kb.rules
    base_by_file = {r.get("source"): r for r in base_loaded.rules}
    changes = {c.path: c.change for c in changed_files(base, head, "rules", "*.yaml")}
    changed_entries = {c.stem for c in entry_changes}
    # Files that fail to load at all are reported by file: they have no id.
    loaded_files = {str(r.get("source")) for r in head_loaded.rules}
    for path, change in sorted(changes.items()):
        if change == Change.REMOVED:
            old = base_by_file.get(path)
            review.rules.append(
                RuleResult(
                    old["id"] if old else PurePosixPath(path).stem,
                    old["entry"] if old else "",
                    path,
                    Change.REMOVED,
                )
            )
        elif path not in loaded_files:
            problems = sorted(
                p for p in head_loaded.problems if p.file == path and p.severity == "error"
            )
            base_problems = (
                _regression_problems(base_kb, path, None) if change == Change.CHANGED else []
            )
            review.rules.append(
                RuleResult(
                    PurePosixPath(path).stem,
                    "",
                    path,
                    change,
                    problems,
                    broken_on_base=bool(base_problems)
                    and {_problem_key(p) for p in problems}
                    <= {_problem_key(p) for p in base_problems},
                )
            )
    for rule in head_loaded.rules:
        path = str(rule.get("source"))
        change = changes.get(path)
        logs = _rule_logs(rule)
        if change is None:
            if any(_tree_differs(base, head, log) for log in logs):
                change = Change.LOGS_CHANGED
            elif rule["entry"] in changed_entries:
                change = Change.ENTRY_CHANGED
            else:
                change = Change.UNCHANGED
        document = head_loaded.documents.get(rule["id"])
        problems = [p for p in head_loaded.problems if p.file == path and p.severity == "error"] + [
            p for p in run_rule_tests(rule, head, document) if p.severity == "error"
        ]
        result = RuleResult(
            rule["id"], rule["entry"], path, change, sorted(problems), tests=len(logs)
        )
        if problems and change != Change.ADDED:
            base_problems = _regression_problems(base_kb, path, rule["id"])
            result.broken_on_base = bool(base_problems) and {_problem_key(p) for p in problems} <= {
                _problem_key(p) for p in base_problems
            }
        if change != Change.UNCHANGED or (problems and not result.broken_on_base):
            review.rules.append(result)


def _whole_pack(kb: KnowledgeBase) -> Any:
    from trainwreck.compile.packs import RuleSet, compile_folder

    rule_set = RuleSet()
    if (kb.root / "rules").is_dir():
        bundle, _ = compile_folder(kb.root, cache=False, source=kb)
        rule_set.add(bundle)
    return rule_set


def _found(root: Path, relative: str, rule_set: Any) -> list[str] | None:
    from trainwreck.diagnose import diagnose

    target = root / relative
    if not target.exists() or not rule_set.rules:
        return None if not target.exists() else []
    try:
        return diagnose([str(target)], root, rule_set=rule_set, jobs=1).entries
    except UsageError:
        return []


def _expectations(side: KnowledgeBase | Path) -> dict[str, list[tuple[str, str]]]:
    """log path -> [(kind, entry)] from every rule's tests and every recording on one side."""
    kb = side if isinstance(side, KnowledgeBase) else KnowledgeBase.load(side)
    root = kb.root
    expect: dict[str, list[tuple[str, str]]] = {}
    for rule in kb.rules.rules:
        for kind in ("match", "clean"):
            for log in rule["tests"][kind]:
                if PurePosixPath(log).is_absolute() or ".." in PurePosixPath(log).parts:
                    continue  # outside the repository: compile reports it, review reads only inside
                pair = (kind, rule["entry"])
                if pair not in expect.setdefault(log, []):
                    expect[log].append(pair)
    recordings = root / "recordings"
    if recordings.is_dir():
        for folder in sorted(recordings.iterdir()):
            if (folder / "broken").is_dir() and (folder / "fixed").is_dir():
                expect.setdefault(f"recordings/{folder.name}/broken", []).append(
                    ("broken", folder.name)
                )
                expect.setdefault(f"recordings/{folder.name}/fixed", []).append(
                    ("fixed", folder.name)
                )
    # Findings are per entry: a log that one rule of an entry must match and another rule of
    # the same entry must stay silent on is, for the whole pack, a match of that entry.
    for log, pairs in expect.items():
        matched = {entry for kind, entry in pairs if kind == "match"}
        expect[log] = [(k, e) for k, e in pairs if not (k == "clean" and e in matched)]
    return expect


def _broken_reasons(
    expect: list[tuple[str, str]], base: list[str] | None, head: list[str] | None
) -> list[str]:
    """Verdicts that held on the base and do not hold in the working tree."""
    if base is None or head is None:
        return []
    reasons = []
    for kind, entry in expect:
        if kind == "match" and base[:1] == [entry] and head[:1] != [entry]:
            now = f"{_code(head[0])} is" if head else "nothing is"
            reasons.append(f"its entry {_code(entry)} was the first finding on the base; now {now}")
        elif kind == "match" and entry in base and entry not in head:
            reasons.append(f"its entry {_code(entry)} is no longer found")
        elif kind == "clean" and entry not in base and entry in head:
            reasons.append(f"clean log of {_code(entry)} now gets {_code(entry)}")
        elif kind == "broken" and entry in base and entry not in head:
            reasons.append(f"the recorded broken run is no longer diagnosed as {_code(entry)}")
        elif kind == "fixed" and not base and head:
            reasons.append(f"the recorded fixed run now gets {_code(head[0])}")
    return reasons


def review_logs(base_kb: KnowledgeBase, head_kb: KnowledgeBase, review: Review) -> None:
    base, head = base_kb.root, head_kb.root
    head_expect = _expectations(head_kb)
    base_expect = _expectations(base_kb)
    base_pack = _whole_pack(base_kb)
    head_pack = _whole_pack(head_kb)
    for log in sorted(set(head_expect) | set(base_expect)):
        expect = head_expect.get(log) or base_expect.get(log) or []
        before = _found(base, log, base_pack)
        after = _found(head, log, head_pack)
        review.logs_read += 1
        delta = LogDelta(
            log,
            [f"{kind} {entry}" for kind, entry in expect],
            before,
            after,
            _broken_reasons(head_expect.get(log, []), before, after),
        )
        if before != after:
            review.logs.append(delta)


def review_notebooks(base: Path, head_kb: KnowledgeBase, review: Review) -> list[FileChange]:
    from trainwreck.model import DocumentError
    from trainwreck.reproduce import source_hash
    from trainwreck.site import _manifest_records, current_hashes, status_for
    from trainwreck.site.status import reproduction_status

    head = head_kb.root
    changes = changed_files(base, head, "notebooks", "*.ipynb")
    try:
        manifest = json.loads((head / "build" / "manifest.json").read_text(encoding="utf-8"))
        records = _manifest_records(manifest if isinstance(manifest, dict) else None)
    except (OSError, ValueError, AttributeError):
        records = {}

    def code_hash(root: Path, name: str) -> str | None:
        try:
            return source_hash(root / "notebooks" / name)
        except (OSError, ValueError):
            return None

    for change in changes:
        name = PurePosixPath(change.path).name
        code_changed = change.change != Change.CHANGED or code_hash(base, name) != code_hash(
            head, name
        )
        if change.change == Change.REMOVED:
            review.notebooks.append(
                NotebookResult(change.stem, Change.REMOVED, True, "removed", "")
            )
            continue
        entry_path = head / "entries" / f"{change.stem}.yaml"
        try:
            entry = head_kb.entry_at(entry_path)
        except (DocumentError, OSError):
            entry = _entry_listing(head_kb, change.stem)
            if entry is None:
                review.notebooks.append(
                    NotebookResult(
                        change.stem, change.change, code_changed, "no entry of that id", "not-run"
                    )
                )
                continue
        several = len(entry.reproductions) > 1
        reproduction = next((r for r in entry.reproductions if r.id == change.stem), None)
        if reproduction is None:
            status = status_for(entry, records.get(change.stem), current_hashes(head, entry))
        else:
            status = reproduction_status(
                reproduction,
                records.get(change.stem),
                current_hashes(head, reproduction),
                several=several,
            )
        review.notebooks.append(
            NotebookResult(change.stem, change.change, code_changed, status.sentence, status.kind)
        )
    return changes


def _entry_listing(kb: KnowledgeBase, run_id: str) -> Entry | None:
    """The entry one of whose listed reproductions is named `run_id` (a notebook that is not
    its entry's namesake, such as a CPU replay next to a GPU notebook)."""
    for entry in kb.entries:
        if any(r.id == run_id for r in entry.reproductions):
            return entry
    return None


def affected_pages(
    base: Path,
    head: Path,
    review: Review,
    entry_changes: list[FileChange],
    notebook_changes: list[FileChange],
    head_kb: KnowledgeBase | None = None,
) -> list[str]:
    from trainwreck.compile.bundle import site_url

    url = site_url(head)
    pages: dict[str, str] = {}
    for change in entry_changes:
        verb = change.change
        pages[f"entries/{change.stem}/"] = f"entry page ({verb})"
    for change in notebook_changes:
        page = change.stem
        if head_kb is not None and not (head / "entries" / f"{page}.yaml").is_file():
            # A notebook that is one of an entry's listed reproductions is on that entry's page.
            listing = _entry_listing(head_kb, change.stem)
            page = listing.id if listing is not None else page
        pages.setdefault(f"entries/{page}/", "entry page (reproduction)")
    for rule in review.rules:
        if rule.entry and rule.change in _FILE_CHANGES:
            pages.setdefault(f"entries/{rule.entry}/", "entry page (detection rules)")
    if any(r.change in _FILE_CHANGES for r in review.rules):
        pages["rules/"] = "detection rules index"
    if entry_changes:
        pages["entries/"] = "failures index"
        pages["by-severity/"] = "severity index"
        pages["tags/"] = "tag pages"
    for change in changed_files(base, head, "docs", "*.md"):
        name = PurePosixPath(change.path).stem
        target = "" if name == "index" else f"{name}/"
        pages[target] = f"{_code(f'docs/{name}.md')} ({change.change})"
    # Stems and the site address come from the pull request: the page is shown as code.
    return [f"{_code(url + path)} : {what}" for path, what in sorted(pages.items())]


def review_change(root: Path, base_ref: str = "main") -> Review:
    """The review of the working tree at `root` against `base_ref`."""
    root = Path(root)
    commit = resolve_ref(root, base_ref)
    review = Review(base_ref, commit)
    head_kb = KnowledgeBase.load(root)
    with base_tree(root, commit) as base:
        base_kb = KnowledgeBase.load(base)
        entry_changes = review_entries(base_kb, head_kb, review)
        review_rules(base_kb, head_kb, review, entry_changes)
        review_logs(base_kb, head_kb, review)
        notebook_changes = review_notebooks(base, head_kb, review)
        review.pages = affected_pages(base, root, review, entry_changes, notebook_changes, head_kb)
    return review
