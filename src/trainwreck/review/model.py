"""The model of a review: what changed, and the verdict on each entry, rule, log and notebook."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import PurePosixPath

from trainwreck.model import Problem
from trainwreck.review.text import _code, _problem_text


class Change(str, Enum):
    """How a change touches a file, or a rule. str-valued: compares and prints as its value."""

    ADDED = "added"
    CHANGED = "changed"  # by content
    REMOVED = "removed"
    LOGS_CHANGED = "logs-changed"  # a rule whose file is the same but whose regression logs differ
    ENTRY_CHANGED = "entry-changed"  # a rule whose entry changed
    UNCHANGED = "unchanged"

    def __str__(self) -> str:
        return self.value


@dataclass
class FileChange:
    path: str  # relative to the root, posix
    change: Change  # added, changed or removed

    @property
    def stem(self) -> str:
        return PurePosixPath(self.path).stem


@dataclass
class EntryResult:
    id: str
    change: Change
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


@dataclass
class RuleResult:
    id: str
    entry: str
    file: str
    change: Change
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
    change: Change
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
            if r.change != Change.REMOVED and r.problems and not r.broken_on_base
        ]
        out += [f"log {_code(d.path)}: {why}" for d in self.logs for why in d.broken]
        out += [
            f"notebook {_code(n.id)}: {_code(n.status)}"
            for n in self.notebooks
            if n.kind == "failed" and n.change != Change.REMOVED
        ]
        return out
