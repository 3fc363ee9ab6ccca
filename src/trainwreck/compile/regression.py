"""A rule's own tests: its regression logs (`tests.match` / `tests.clean`) and its `examples`.

Each rule runs alone, through the engine, on the files a regression log names; the verdict is
whether it fired and, for a clean log it fired on, its first evidence line. `compile` and
`review` call these; nothing here imports a stage (diagnose, site), so the rules package stays
below them.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck import engine as eng
from trainwreck.model import Document, Problem


class NoVerdict(Exception):
    """The rule could not be run on the log at all (nothing to read, an unusable rule): the
    message is the problem reported at the test."""


@dataclass(frozen=True)
class Verdict:
    fired: bool
    first_evidence: tuple[str, int] | None  # (file, line) of the first evidence when it fired


def run_alone(rule: dict[str, Any], files: list[str]) -> Verdict:
    """Run one rule on `files` as `trainwreck diagnose FILE...` would with only this rule: the
    same inputs (each file once, by real path), the same engine, the same first evidence line.
    Raises NoVerdict where diagnose would stop with a usage error."""
    inputs: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for name in files:
        key = os.path.realpath(name)
        if key not in seen:
            seen.add(key)
            inputs.append((name, name))
    if not inputs:
        raise NoVerdict("no log files to read")
    try:
        engine = eng.Engine([rule])
    except Exception:  # as diagnose: a rule the engine cannot load is not run
        raise NoVerdict("no usable rules (see the warnings)") from None
    scan = engine.scan(inputs)
    for run in scan.runs:
        try:
            outcome = eng.evaluate(run, scan)
        except Exception:  # diagnose skips a rule that fails while evaluating, with a warning
            continue
        if not outcome.fired:
            continue
        shown = rule["report"]["max_evidence"] > 0 and outcome.evidence
        first = outcome.evidence[0] if shown else None
        return Verdict(True, (first.file, first.line) if first else None)
    return Verdict(False, None)


def run_rule_tests(
    rule: dict[str, Any],
    root: Path,
    document: Document | None = None,
) -> list[Problem]:
    """Run one rule alone on its regression logs: every `match` path must yield a finding of the
    rule, no `clean` path may."""
    problems: list[Problem] = []
    source = rule.get("source", rule["id"])

    def where(kind: str, index: int, message: str) -> Problem:
        if document is not None:
            return document.problem(("tests", kind, index), message)
        return Problem(source, 1, 1, f"tests.{kind}[{index}]", message)

    for kind in ("match", "clean"):
        paths = rule["tests"][kind]
        if not paths:
            problems.append(where(kind, 0, f"at least one '{kind}' log is required"))
        for index, item in enumerate(paths):
            path = root / item
            if not os.path.lexists(path):
                problems.append(where(kind, index, f"regression log '{item}' does not exist"))
                continue
            files, refused = regression_files(root, str(item))
            if refused:
                problems.append(where(kind, index, refused))
                continue
            try:
                verdict = run_alone(rule, files)
            except NoVerdict as exc:
                problems.append(where(kind, index, str(exc)))
                continue
            if kind == "match" and not verdict.fired:
                problems.append(where(kind, index, f"rule did not fire on '{item}' (it must)"))
            if kind == "clean" and verdict.fired:
                at = ""
                if verdict.first_evidence is not None:
                    file, line = verdict.first_evidence
                    at = f" (first evidence {os.path.relpath(file, root)}:{line})"
                problems.append(where(kind, index, f"rule fired on clean log '{item}'{at}"))
    return problems


def regression_files(root: Path, item: str) -> tuple[list[str], str | None]:
    """The files a regression log names (a file, or a folder of per-rank files), or why it may
    not be read. CI runs compile on pull requests: a path reaching outside the repository's
    tests/ (`..`, absolute, a symlink) would let a rule's pass or fail reveal any file's contents,
    and a FIFO or device would hang it. Everything is checked before anything is opened."""
    tests = (root / "tests").resolve()
    refusal = f"regression log '{item}' must be a regular file under tests/ of the repository"

    def confined(path: Path) -> bool:
        try:
            return path.resolve(strict=True).is_relative_to(tests)
        except (OSError, RuntimeError):  # dangling or looping symlink
            return False

    path = root / item
    if Path(item).is_absolute() or not confined(path):
        return [], refusal
    if not path.is_dir():
        return ([str(path)], None) if path.is_file() else ([], refusal)
    files: list[str] = []
    for folder, dirs, names in os.walk(path):  # the order diagnose walks a folder in
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            full = Path(folder, name)
            if not (confined(full) and full.is_file()):
                shown = os.path.relpath(full, root)
                return [], f"{refusal} (or a folder of them): '{shown}' is not"
            files.append(str(full))
    return files, None


def run_example_tests(rule: dict[str, Any], document: Document | None = None) -> list[Problem]:
    """Every example of the rule is recognised by it (by its `matcher` when one is named) and,
    unless `fires` is false, makes the rule fire on its own."""
    problems: list[Problem] = []
    examples = rule.get("examples") or []
    if not examples:
        return problems
    engine = eng.Engine([rule])
    for index, example in enumerate(examples):
        scan = engine.scan([(f"example {index}", io.BytesIO(example["text"].encode()))], jobs=1)
        run = scan.runs[0]
        wanted = example.get("matcher")
        states = [run.matchers[wanted]] if wanted in run.matchers else list(run.matchers.values())
        message = None
        if not any(state.count for state in states):
            by = f"matcher '{wanted}'" if wanted else "any matcher"
            message = f"example is not recognised by {by}: {example['text'][:80]!r}"
        elif example.get("fires", True) and not eng.evaluate(run, scan).fired:
            message = f"rule does not fire on this example alone (set fires: false if it cannot): {example['text'][:80]!r}"
        if message is not None:
            if document is not None:
                problems.append(document.problem(("examples", index, "text"), message))
            else:
                problems.append(
                    Problem(rule.get("source", rule["id"]), 1, 1, f"examples[{index}]", message)
                )
    return problems
