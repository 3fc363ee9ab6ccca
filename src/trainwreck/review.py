"""`trainwreck review [--base REF]`: what a change does to the knowledge base, as Markdown.

    trainwreck review [--base REF] [--out FILE]

Compares the knowledge base at git REF (default `main`; in a pull request, the base commit) with
the working tree, and writes a summary for a pull-request comment:

- entries added, changed and removed, with their `trainwreck check` result;
- rules added, changed and removed, with their regression verdict (`trainwreck compile`'s test
  of each rule alone on its `tests.match` and `tests.clean` logs);
- the diagnosis delta: every regression log any rule lists and every recorded evidence folder
  (recordings/<id>/broken, fixed) diagnosed with the whole pack on each side, reporting the logs
  whose first finding changed and the findings gained or lost;
- notebooks added and changed: whether their code changed or only their prose, and their run
  status for the current source (from build/manifest.json, as the site reports it);
- the site pages the change affects.

A verdict breaks (exit 1) when the change introduces a check error, a rule that fails
validation or its regression logs (and did not on the base), a `tests.match` log whose entry
was its first finding on the base and no longer is, a `tests.clean` log that gains the finding
it must not have, a recording whose broken/ run stops being diagnosed as its entry or whose
fixed/ run stops being clean, or a notebook whose run of the current source failed. Exit 0
otherwise, 2 on usage errors (not a git checkout, unknown REF).

The base is read from `git archive REF` unpacked into a temporary folder: the working tree,
its index and its worktrees are never touched.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trainwreck.errors import CommandUsageError, UsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.model import Problem

MARKER = "<!-- trainwreck-review -->"  # the PR workflow finds and updates its comment by this
MAX_PROBLEMS_SHOWN = 8


class ReviewError(CommandUsageError):
    """Bad input (not a git checkout, unknown ref): reported as one line, exit 2."""


# --- the base tree ---------------------------------------------------------------------------


def _git(root: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, check=False, timeout=300
        )
    except FileNotFoundError:
        raise ReviewError("git is not installed") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ReviewError(message[-1] if message else f"git {args[0]} failed")
    return done.stdout


def resolve_ref(root: Path, ref: str) -> str:
    """The commit REF names, or ReviewError."""
    if ref.startswith("-"):
        raise ReviewError(f"'{ref}' is not a git ref")
    # A clone made for CI or from a fork often has origin/main but no local main.
    for candidate in (ref, f"origin/{ref}") if "/" not in ref else (ref,):
        try:
            return (
                _git(root, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
                .decode()
                .strip()
            )
        except ReviewError:
            continue
    raise ReviewError(f"'{ref}' names no commit in {root}")


# What a review reads from the base: everything else in the repository is left out of the archive.
KNOWLEDGE_BASE = (
    "entries",
    "rules",
    "notebooks",
    "tests",
    "recordings",
    "docs",
    "schemas",
    "mkdocs.yml",
)


def _safe(member: tarfile.TarInfo) -> bool:
    """Regular files and folders inside the target only: a committed symlink or a name with
    '..' must not write outside the temporary folder."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith("/") or ".." in parts:
        return False
    return member.isfile() or member.isdir()


@contextmanager
def base_tree(root: Path, commit: str) -> Iterator[Path]:
    """The knowledge base at `commit`, unpacked into a temporary folder for the duration
    (streamed from `git archive`, so a large repository is never held in memory)."""
    # --root may be a folder inside the repository: read the same folder at the base.
    # (git ls-tree and git archive run from the top level: in a subfolder they filter by it.)
    prefix = _git(root, "rev-parse", "--show-prefix").decode("utf-8", "replace").strip()
    top = Path(_git(root, "rev-parse", "--show-toplevel").decode("utf-8", "replace").strip())
    tree = f"{commit}:{prefix.rstrip('/')}" if prefix else commit
    listing = _git(top, "ls-tree", "--name-only", tree).decode("utf-8", "replace")
    present = set(listing.split("\n"))
    wanted = [name for name in KNOWLEDGE_BASE if name in present]
    folder = Path(tempfile.mkdtemp(prefix="trainwreck-review-"))
    try:
        if wanted:
            _extract(top, tree, wanted, folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _extract(root: Path, tree: str, paths: list[str], folder: Path) -> None:
    command = ["git", "-C", str(root), "archive", "--format=tar", tree, "--", *paths]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        try:
            with tarfile.open(fileobj=process.stdout, mode="r|") as archive:
                for member in archive:
                    if not _safe(member):
                        continue
                    if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                        archive.extract(member, folder, filter="data")
                    else:
                        archive.extract(member, folder)
        except tarfile.TarError as exc:
            raise ReviewError(f"cannot read git archive of {tree[:12]}: {exc}") from None
        finally:
            process.stdout.close()
            error = process.stderr.read().decode("utf-8", "replace") if process.stderr else ""
            process.wait()
    if process.returncode != 0:
        lines = error.strip().splitlines()
        raise ReviewError(lines[-1] if lines else "git archive failed")


# --- the model of a review -------------------------------------------------------------------


@dataclass
class FileChange:
    path: str  # relative to the root, posix
    change: str  # added | changed | removed

    @property
    def stem(self) -> str:
        return PurePosixPath(self.path).stem


@dataclass
class EntryResult:
    id: str
    change: str
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


@dataclass
class RuleResult:
    id: str
    entry: str
    file: str
    change: str  # added | changed | removed | logs-changed | entry-changed | unchanged
    problems: list[Problem] = field(default_factory=list)
    tests: int = 0
    broken_on_base: bool = False

    @property
    def passes(self) -> bool:
        return not self.problems


@dataclass
class LogDelta:
    path: str
    expect: list[str]  # "match <entry>" / "clean <entry>" / "broken <id>" / "fixed <id>"
    base: list[str] | None  # entries found on the base, first finding first (None: absent)
    head: list[str] | None
    broken: list[str] = field(default_factory=list)

    @property
    def first_changed(self) -> bool:
        return (self.base or [None])[0] != (self.head or [None])[0]

    @property
    def gained(self) -> list[str]:
        return [e for e in self.head or [] if e not in (self.base or [])]

    @property
    def lost(self) -> list[str]:
        return [e for e in self.base or [] if e not in (self.head or [])]


@dataclass
class NotebookResult:
    id: str
    change: str
    code_changed: bool
    status: str  # the status sentence the site shows
    kind: str  # site.Status.kind


@dataclass
class Review:
    base_ref: str
    base_commit: str
    entries: list[EntryResult] = field(default_factory=list)
    other_check_errors: list[Problem] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    logs: list[LogDelta] = field(default_factory=list)
    logs_read: int = 0
    notebooks: list[NotebookResult] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)

    @property
    def broken(self) -> list[str]:
        """One line per broken verdict."""
        out = [
            f"entry {_code(e.id)}: {len(e.errors)} check error(s)" for e in self.entries if e.errors
        ]
        out += [f"check: {_problem_text(p)}" for p in self.other_check_errors]
        out += [
            f"rule {_code(r.id)}: {len(r.problems)} problem(s) in validation or regression logs"
            for r in self.rules
            if r.change != "removed" and r.problems and not r.broken_on_base
        ]
        out += [f"log {_code(d.path)}: {why}" for d in self.logs for why in d.broken]
        out += [
            f"notebook {_code(n.id)}: {n.status}"
            for n in self.notebooks
            if n.kind == "failed" and n.change != "removed"
        ]
        return out


# --- comparing the two sides -----------------------------------------------------------------


def changed_files(base: Path, head: Path, folder: str, pattern: str) -> list[FileChange]:
    """Files matching `pattern` in `folder` added, changed (by content) or removed."""
    old = {p.name: p for p in sorted((base / folder).glob(pattern)) if p.is_file()}
    new = {p.name: p for p in sorted((head / folder).glob(pattern)) if p.is_file()}
    changes = []
    for name in sorted(set(old) | set(new)):
        path = f"{folder}/{name}"
        if name not in old:
            changes.append(FileChange(path, "added"))
        elif name not in new:
            changes.append(FileChange(path, "removed"))
        elif old[name].read_bytes() != new[name].read_bytes():
            changes.append(FileChange(path, "changed"))
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
        if change.change != "removed":
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
    from trainwreck.rules.regression import run_rule_tests

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
    from trainwreck.rules.regression import run_rule_tests

    base, head = base_kb.root, head_kb.root
    head_loaded = head_kb.rules
    base_loaded = base_kb.rules
    base_by_file = {r.get("source"): r for r in base_loaded.rules}
    changes = {c.path: c.change for c in changed_files(base, head, "rules", "*.yaml")}
    changed_entries = {c.stem for c in entry_changes}
    # Files that fail to load at all are reported by file: they have no id.
    loaded_files = {str(r.get("source")) for r in head_loaded.rules}
    for path, change in sorted(changes.items()):
        if change == "removed":
            old = base_by_file.get(path)
            review.rules.append(
                RuleResult(
                    old["id"] if old else PurePosixPath(path).stem,
                    old["entry"] if old else "",
                    path,
                    "removed",
                )
            )
        elif path not in loaded_files:
            problems = sorted(
                p for p in head_loaded.problems if p.file == path and p.severity == "error"
            )
            base_problems = _regression_problems(base_kb, path, None) if change == "changed" else []
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
                change = "logs-changed"
            elif rule["entry"] in changed_entries:
                change = "entry-changed"
            else:
                change = "unchanged"
        document = head_loaded.documents.get(rule["id"])
        problems = [p for p in head_loaded.problems if p.file == path and p.severity == "error"] + [
            p for p in run_rule_tests(rule, head, document) if p.severity == "error"
        ]
        result = RuleResult(
            rule["id"], rule["entry"], path, change, sorted(problems), tests=len(logs)
        )
        if problems and change != "added":
            base_problems = _regression_problems(base_kb, path, rule["id"])
            result.broken_on_base = bool(base_problems) and {_problem_key(p) for p in problems} <= {
                _problem_key(p) for p in base_problems
            }
        if change != "unchanged" or (problems and not result.broken_on_base):
            review.rules.append(result)


def _whole_pack(kb: KnowledgeBase) -> Any:
    from trainwreck.rules.bundle import RuleSet, compile_folder

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
        code_changed = change.change != "changed" or code_hash(base, name) != code_hash(head, name)
        if change.change == "removed":
            review.notebooks.append(NotebookResult(change.stem, "removed", True, "removed", ""))
            continue
        entry_path = head / "entries" / f"{change.stem}.yaml"
        try:
            entry = head_kb.entry_at(entry_path)
        except (DocumentError, OSError):
            review.notebooks.append(
                NotebookResult(
                    change.stem, change.change, code_changed, "no entry of that id", "not-run"
                )
            )
            continue
        status = status_for(entry, records.get(change.stem), current_hashes(head, entry))
        review.notebooks.append(
            NotebookResult(change.stem, change.change, code_changed, status.sentence, status.kind)
        )
    return changes


def affected_pages(
    base: Path,
    head: Path,
    review: Review,
    entry_changes: list[FileChange],
    notebook_changes: list[FileChange],
) -> list[str]:
    from trainwreck.rules.bundle import site_url

    url = site_url(head)
    pages: dict[str, str] = {}
    for change in entry_changes:
        verb = "removed" if change.change == "removed" else change.change
        pages[f"entries/{change.stem}/"] = f"entry page ({verb})"
    for change in notebook_changes:
        pages.setdefault(f"entries/{change.stem}/", "entry page (reproduction)")
    for rule in review.rules:
        if rule.entry and rule.change in ("added", "changed", "removed"):
            pages.setdefault(f"entries/{rule.entry}/", "entry page (detection rules)")
    if any(r.change in ("added", "changed", "removed") for r in review.rules):
        pages["rules/"] = "detection rules index"
    if entry_changes:
        pages["entries/"] = "failures index"
        pages["by-severity/"] = "severity index"
        pages["tags/"] = "tag pages"
    for change in changed_files(base, head, "docs", "*.md"):
        name = PurePosixPath(change.path).stem
        target = "" if name == "index" else f"{name}/"
        pages[target] = f"docs/{name}.md ({change.change})"
    return [f"{url}{path} : {what}" for path, what in sorted(pages.items())]


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
        review.pages = affected_pages(base, root, review, entry_changes, notebook_changes)
    return review


# --- Markdown --------------------------------------------------------------------------------


def _code(text: Any) -> str:
    """Contributed text as an inline code span in a table cell: no backticks, newlines or
    pipes survive to become Markdown (ids and paths come from a pull request)."""
    cleaned = " ".join(str(text).replace("`", "'").split()).replace("|", "\\|")
    return f"`{cleaned[:300]}`"


def _problem_text(problem: Problem) -> str:
    return _code(str(problem))


def _entries_list(found: list[str] | None) -> str:
    if found is None:
        return "(no such log)"
    return ", ".join(_code(e) for e in found) if found else "no finding"


def render_markdown(review: Review) -> str:
    broken = review.broken
    head = f"{len(broken)} verdict(s) broken" if broken else "no verdict broken"
    out = [
        MARKER,
        f"## Trainwreck review: {head}",
        "",
        f"Compared with {_code(review.base_ref)} ({_code(review.base_commit[:12])}).",
    ]
    if broken:
        out += ["", "### Broken verdicts", ""] + [f"- {line}" for line in broken]

    out += ["", "### Entries", ""]
    if not review.entries:
        out.append("No entry added, changed or removed.")
    else:
        out += ["| entry | change | `trainwreck check` |", "|---|---|---|"]
        for entry in review.entries:
            if entry.change == "removed":
                verdict = "-"
            elif entry.errors:
                verdict = f"**{len(entry.errors)} error(s)**"
            else:
                verdict = "passes"
            if entry.warnings:
                verdict += f", {len(entry.warnings)} warning(s)"
            out.append(f"| {_code(entry.id)} | {entry.change} | {verdict} |")
        for entry in review.entries:
            shown = (entry.errors + entry.warnings)[:MAX_PROBLEMS_SHOWN]
            if shown:
                out += ["", f"{_code(entry.id)}:", ""] + [f"- {_problem_text(p)}" for p in shown]
    if review.other_check_errors:
        out += ["", "New check errors in entries this change did not touch:", ""]
        out += [f"- {_problem_text(p)}" for p in review.other_check_errors[:MAX_PROBLEMS_SHOWN]]

    out += ["", "### Rules", ""]
    if not review.rules:
        out.append("No rule added, changed or removed, and every rule's verdict is unchanged.")
    else:
        out += ["| rule | entry | change | regression verdict |", "|---|---|---|---|"]
        for rule in review.rules:
            if rule.change == "removed":
                verdict = "-"
            elif rule.passes:
                verdict = f"passes its {rule.tests} regression log(s)"
            else:
                verdict = f"**fails**: {len(rule.problems)} problem(s)"
                if rule.broken_on_base:
                    verdict += " (already on the base)"
            entry = _code(rule.entry) if rule.entry else "-"
            out.append(f"| {_code(rule.id)} | {entry} | {rule.change} | {verdict} |")
        for rule in review.rules:
            if rule.problems:
                out += ["", f"{_code(rule.id)}:", ""]
                out += [f"- {_problem_text(p)}" for p in rule.problems[:MAX_PROBLEMS_SHOWN]]

    out += ["", "### Diagnosis delta", ""]
    out.append(
        f"{review.logs_read} regression log(s) and evidence folder(s) diagnosed with the whole "
        f"pack on both sides; {len(review.logs)} changed."
    )
    if review.logs:
        out += ["", "| log | expected | base | this change | verdict |", "|---|---|---|---|---|"]
        for delta in review.logs:
            if delta.broken:
                verdict = "**broken**: " + "; ".join(delta.broken)
            elif delta.base is None:
                verdict = "new log"
            elif delta.head is None:
                verdict = "log removed"
            else:
                parts = []
                if delta.first_changed:
                    parts.append("first finding changed")
                if delta.gained:
                    parts.append("gained " + ", ".join(_code(e) for e in delta.gained))
                if delta.lost:
                    parts.append("lost " + ", ".join(_code(e) for e in delta.lost))
                verdict = "; ".join(parts) or "order changed"
            expected = ", ".join(_code(e) for e in delta.expect) or "-"
            out.append(
                f"| {_code(delta.path)} | {expected} | {_entries_list(delta.base)} "
                f"| {_entries_list(delta.head)} | {verdict} |"
            )

    out += ["", "### Notebooks", ""]
    if not review.notebooks:
        out.append("No notebook added, changed or removed.")
    else:
        out += ["| notebook | change | run status |", "|---|---|---|"]
        for notebook in review.notebooks:
            change = notebook.change
            if change == "changed":
                change += " (code)" if notebook.code_changed else " (prose only)"
            status = notebook.status.replace("|", "\\|")
            if notebook.kind == "failed":
                status = f"**{status}**"
            out.append(f"| {_code(notebook.id)} | {change} | {status} |")

    out += ["", "### Pages affected", ""]
    out += [f"- {page}" for page in review.pages] or ["None."]
    return "\n".join(out) + "\n"


# --- CLI -------------------------------------------------------------------------------------


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base",
        default="main",
        metavar="REF",
        help="git ref to compare the working tree with (default: main)",
    )
    parser.add_argument(
        "--out", default=None, metavar="FILE", help="write the Markdown here instead of stdout"
    )


def run(args: argparse.Namespace) -> int:
    review = review_change(Path(args.root), args.base)
    text = render_markdown(review)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ReviewError(f"cannot write {args.out}: {exc}") from None
    else:
        sys.stdout.write(text)
    broken = review.broken
    for line in broken:
        print(f"trainwreck review: broken: {line}", file=sys.stderr)
    return 1 if broken else 0
