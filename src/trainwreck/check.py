"""`trainwreck check`: validate the knowledge base and report every problem at its line.

Checks, per entry file: YAML syntax (and the hazards of untrusted YAML), the schema, the
editor schema comment, id equals file name; across entries: unique ids, related ids exist and
mutual relations are mutual, fingerprint rules exist; per reproduction: the notebook exists and is
well-formed (delegated to the reproduce stage, which imports nothing heavy to do it); against the
installed libraries: every name, environment variable and config key the entries and their rules
cite exists, and every Python code example compiles (looked up in separate processes, so check
itself never imports torch).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from trainwreck.errors import CommandUsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.knowledge.checked import checked_problems, missing_check_problem
from trainwreck.knowledge.examples import example_problems
from trainwreck.knowledge.links import entry_side_problems
from trainwreck.knowledge.names import documents, name_problems
from trainwreck.knowledge.relations import RECIPROCAL
from trainwreck.markup import markup_problems, notebook_markup_problems, url_problem
from trainwreck.model import (
    Document,
    DocumentError,
    Entry,
    Problem,
    Severity,
    display_path,
    entry_files,
    schema_problems,
)
from trainwreck.placeholders import placeholder_lines

SCHEMA_COMMENT = "# yaml-language-server: $schema=../schemas/entry.schema.json"

__all__ = ["RECIPROCAL", "check_entries", "configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        help="entry files or folders to check (default: entries/ under --root)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--require-checked",
        action="store_true",
        help="warn about every entry without a checked block (an independent fact check, "
        "docs/audits.md)",
    )


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    try:
        targets = resolve_targets(root, args.paths)
    except FileNotFoundError as exc:
        raise CommandUsageError(str(exc)) from None
    problems, checked = check_entries(
        root, targets, require_checked=getattr(args, "require_checked", False)
    )
    errors = [p for p in problems if p.severity == "error"]
    warnings = [p for p in problems if p.severity == "warning"]
    notes = [p for p in problems if p.severity == "note"]
    if args.format == "json":
        json.dump(
            {
                "checked": checked,
                "errors": len(errors),
                "warnings": len(warnings),
                "notes": len(notes),
                "problems": [p.to_json() for p in problems],
            },
            sys.stdout,
            indent=2,
        )
        print()
    else:
        for problem in problems:
            print(problem)
        verdict = "clean" if not errors else f"{len(errors)} error(s)"
        print(
            f"checked {checked} entr{'y' if checked == 1 else 'ies'}: {verdict}"
            + (f", {len(warnings)} warning(s)" if warnings else "")
            + (f", {len(notes)} note(s) on what this machine cannot check" if notes else ""),
            file=sys.stderr,
        )
    return 1 if errors else 0


def resolve_targets(root: Path, paths: Iterable[str]) -> list[Path]:
    """The entry files named on the command line (folders expand to their *.yaml)."""
    paths = list(paths)
    if not paths:
        return entry_files(root)
    targets: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_absolute() and not path.exists():
            path = root / raw
        if path.is_dir():
            targets.extend(sorted(path.glob("*.yaml")))
        elif path.exists():
            targets.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {raw}")
    return targets


def check_entries(
    root: Path,
    targets: list[Path],
    kb: KnowledgeBase | None = None,
    *,
    require_checked: bool = False,
) -> tuple[list[Problem], int]:
    """All problems in `targets`, judged against every entry in the repository for links.
    With `require_checked`, an entry without a `checked` block is a warning."""
    kb = kb or KnowledgeBase.load(root)
    problems: list[Problem] = []
    checked: list[Entry] = []
    for path in targets:
        try:
            entry = kb.entry_at(path)
        except DocumentError as exc:
            problems.append(exc.problem)
            continue
        checked.append(entry)
        problems.extend(entry_problems(entry, root))
        missing = missing_check_problem(entry) if require_checked else None
        if missing is not None:
            problems.append(missing)

    # Links are judged against the whole knowledge base, not only the files named.
    known = {entry.id: entry for entry in checked}
    for other in kb.entries:  # unparsable ones are reported when that file itself is checked
        known.setdefault(other.id, other)
    problems.extend(duplicate_id_problems(checked, known))
    problems.extend(link_problems(checked, known))
    problems.extend(entry_side_problems(checked, kb.rule_links))
    problems.extend(reproduction_problems(checked, root))
    problems.extend(notebook_text_problems(checked, root))
    problems.extend(library_problems(checked, kb, root))
    return sorted(set(problems), key=_order), len(targets)


def _order(problem: Problem) -> tuple[str, int, int, str]:
    return (problem.file, problem.line, problem.column, problem.message)


def entry_problems(entry: Entry, root: Path) -> list[Problem]:
    """Problems visible from the entry file alone."""
    document = entry.document
    problems: list[Problem] = []
    if not isinstance(document.data, dict):
        return [document.problem((), "an entry must be a mapping of sections")]
    first_line = _first_line(entry.path)
    if first_line.strip() != SCHEMA_COMMENT:
        problems.append(Problem(document.file, 1, 1, "", f"first line must be '{SCHEMA_COMMENT}'"))
    problems.extend(schema_problems(document, "entry.schema.json", root))
    declared = document.data.get("id")
    if isinstance(declared, str) and declared != entry.path.stem:
        problems.append(
            document.problem(
                ("id",), f"id '{declared}' does not match the file name '{entry.path.name}'"
            )
        )
    problems.extend(reference_problems(document))
    problems.extend(quick_answer_problems(document))
    problems.extend(markup_problems(document))
    problems.extend(checked_problems(entry, root))
    problems.extend(placeholder_problems(entry))
    return problems


def placeholder_problems(entry: Entry) -> list[Problem]:
    """Each line `trainwreck new` left saying TODO, as a warning: the skeleton checks as
    written, and this is the list of what is still to fill."""
    try:
        text = entry.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    lines = text.splitlines()
    return [
        Problem(
            entry.document.file,
            number,
            len(lines[number - 1]) - len(lines[number - 1].lstrip()) + 1,
            "",
            "placeholder left by `trainwreck new` (the line says TODO): fill it in",
            Severity.WARNING,
        )
        for number in placeholder_lines(text)
    ]


def _first_line(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.readline()


def reference_problems(document: Document) -> list[Problem]:
    """URLs must be absolute http(s) URLs with a real-looking host, in RFC 3986 characters with
    balanced parentheses (jsonschema checks format 'uri' only with an extra package)."""
    problems = []
    for index, reference in enumerate(document.data.get("references") or []):
        if not isinstance(reference, dict) or not isinstance(reference.get("url"), str):
            continue
        message = url_problem(reference["url"])
        if message:
            problems.append(document.problem(("references", index, "url"), message))
    return problems


# Marks that open a phrase and must be closed before the line ends.
_PAIRED = (("`", "`"), ('"', '"'), ("(", ")"), ("[", "]"))


def quick_answer_problems(document: Document) -> list[Problem]:
    """The quick answer is shown whole in tables and cards: one line, every quote, code span
    and bracket closed, so no reader sees it end mid-phrase."""
    text = document.data.get("quick_answer")
    if not isinstance(text, str):
        return []  # the schema reports a missing or mistyped quick answer
    where = ("quick_answer",)
    if "\n" in text.strip():
        return [document.problem(where, "must be one line")]
    for opening, closing in _PAIRED:
        unbalanced = (
            text.count(opening) % 2
            if opening == closing
            else text.count(opening) - text.count(closing)
        )
        if unbalanced:
            message = f"unbalanced {opening!r}: the line ends mid-phrase"
            return [document.problem(where, message)]
    return []


def duplicate_id_problems(checked: list[Entry], known: dict[str, Entry]) -> list[Problem]:
    """Two files declaring the same id (the file-name rule catches most, not copies)."""
    by_id: dict[str, list[Entry]] = {}
    seen_paths = set()
    for entry in [*checked, *known.values()]:
        if entry.path in seen_paths:
            continue
        seen_paths.add(entry.path)
        declared = entry.data.get("id")
        if isinstance(declared, str):
            by_id.setdefault(declared, []).append(entry)
    problems = []
    checked_paths = {entry.path for entry in checked}
    for declared, owners in by_id.items():
        if len(owners) < 2:
            continue
        for owner in owners:
            if owner.path not in checked_paths:
                continue
            others = ", ".join(o.document.file for o in owners if o is not owner)
            problems.append(
                owner.document.problem(("id",), f"id '{declared}' is also used by {others}")
            )
    return problems


def link_problems(checked: list[Entry], known: dict[str, Entry]) -> list[Problem]:
    problems = []
    for entry in checked:
        for index, link in enumerate(entry.related):
            if not isinstance(link, dict):
                continue
            target, relation = link.get("id"), link.get("relation")
            if not isinstance(target, str):
                continue
            where = ("related", index, "id")
            if target == entry.id:
                problems.append(entry.document.problem(where, "an entry cannot relate to itself"))
                continue
            other = known.get(target)
            if other is None:
                problems.append(
                    entry.document.problem(where, f"related entry '{target}' does not exist")
                )
                continue
            expected = RECIPROCAL.get(str(relation))
            if expected is None:
                continue
            back = {
                (str(link.get("id")), str(link.get("relation")))
                for link in other.related
                if isinstance(link, dict)
            }
            if (entry.id, expected) not in back:
                problems.append(
                    entry.document.problem(
                        ("related", index, "relation"),
                        f"'{relation}' {target} must be mutual: "
                        f"{other.document.file} should list {{id: {entry.id}, relation: {expected}}}",
                    )
                )
    return problems


def library_problems(checked: list[Entry], kb: KnowledgeBase, root: Path) -> list[Problem]:
    """What the checked entries and their rules cite, looked up in the installed libraries
    (knowledge/names.py), and their code examples compiled (knowledge/examples.py)."""
    ids = {entry.id for entry in checked}
    links = [link for link in kb.rule_links.values() if link.entry in ids]
    return name_problems(documents(checked, links, root), root) + example_problems(checked, root)


def notebook_text_problems(checked: list[Entry], root: Path) -> list[Problem]:
    """Markup in the markdown cells of each entry's notebook (shown to readers on its page).
    Only regular files inside notebooks/ are read; other paths are reported elsewhere."""
    problems = []
    notebooks = (root / "notebooks").resolve()
    for entry in checked:
        for reproduction in entry.reproductions:
            notebook = reproduction.notebook
            if notebook is None:
                continue
            path = (root / notebook).resolve()
            if path.parent != notebooks or not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # reported by the notebook checks
            problems.extend(notebook_markup_problems(text, display_path(path, root)))
    return problems


def reproduction_problems(checked: list[Entry], root: Path) -> list[Problem]:
    """Each entry has its notebook (well-formed, with parameters) or says why it cannot."""
    from trainwreck.reproduce import notebook_problems

    problems = []
    owners: dict[str, str] = {}  # reproduction id -> the entry that has it
    for entry in checked:
        if not isinstance(entry.data.get("reproduction"), (dict, list)):
            continue  # the schema reports a missing or malformed reproduction
        problems.extend(notebook_problems(entry, root))
        for reproduction in entry.reproductions:
            owner = owners.setdefault(reproduction.id, entry.id)
            if owner != entry.id:
                problems.append(
                    entry.document.problem(
                        reproduction.path,
                        f"reproduction id {reproduction.id!r} is also entry {owner!r}'s: a run "
                        "is named by its id, so no two entries' reproductions may share one",
                    )
                )
    return problems
