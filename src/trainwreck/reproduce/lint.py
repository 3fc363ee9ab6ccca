"""What is wrong with an entry's reproduction notebook, for `trainwreck check`.

Standard library only (nbformat's schema check runs when the repro extra is installed): the core
install's `check` imports this module.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from trainwreck.model import Entry, Problem, display_path
from trainwreck.reproduce.recordings import recording_problems
from trainwreck.reproduce.source import cell_source
from trainwreck.reproduce.targets import notebook_file


def notebook_problems(entry: Entry, root: Path) -> list[Problem]:
    """What is wrong with an entry's reproduction notebook and GPU recording, as Problems.

    Needs only the standard library (nbformat's schema check runs when it is installed).
    """
    root = Path(root)
    reproduction = entry.reproduction if isinstance(entry.reproduction, dict) else {}
    if "not_reproducible" in reproduction:
        return []
    doc = entry.document
    notebook = reproduction.get("notebook")
    if not notebook:
        return [
            doc.problem(
                ("reproduction",) if "reproduction" in entry.data else (),
                "no reproduction notebook: set reproduction.notebook and device, or "
                "reproduction.not_reproducible with the reason",
            )
        ]
    try:
        path = notebook_file(root, str(notebook))
    except ValueError as exc:
        return [doc.problem(("reproduction", "notebook"), str(exc))]
    display = display_path(path, root)
    problems: list[Problem] = []
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        return [Problem(display, 1, 1, "", f"not valid UTF-8: {exc.reason}")]
    except json.JSONDecodeError as exc:
        return [Problem(display, exc.lineno, exc.colno, "", f"not valid JSON: {exc.msg}")]
    except OSError as exc:
        return [Problem(display, 1, 1, "", f"cannot read notebook: {exc.strerror}")]
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return [Problem(display, 1, 1, "", "not a Jupyter notebook (no 'cells' list)")]
    if data.get("nbformat") != 4:
        problems.append(
            Problem(display, 1, 1, "nbformat", f"expected nbformat 4, found {data.get('nbformat')}")
        )
    problems.extend(_nbformat_schema_problems(data, display))
    problems.extend(_parameters_problems(data, display, text))
    problems.extend(recording_problems(entry.id, root, data, reproduction))
    return problems


def _nbformat_schema_problems(data: dict[str, Any], display: str) -> list[Problem]:
    try:
        import nbformat
    except ImportError:  # core install: the structural checks above and below still run
        return []
    try:
        nbformat.validate(nbformat.from_dict(data))
    except nbformat.ValidationError as exc:
        where = ".".join(str(p) for p in getattr(exc, "absolute_path", []) or [])
        message = str(getattr(exc, "message", exc)).splitlines()[0]
        return [Problem(display, 1, 1, where, f"invalid notebook: {message}")]
    except Exception as exc:  # a malformed notebook must be reported, never crash check
        return [Problem(display, 1, 1, "", f"invalid notebook: {exc}")]
    return []


def _cell_line(text: str, index: int) -> int:
    """Best-effort line of the index-th cell in the notebook's JSON text (1 if not found)."""
    seen = -1
    for number, raw in enumerate(text.splitlines(), 1):
        if '"cell_type"' in raw:
            seen += 1
            if seen == index:
                return number
    return 1


def _parameters_problems(data: dict[str, Any], display: str, text: str) -> list[Problem]:
    cells = data["cells"]
    code = [
        (i, c) for i, c in enumerate(cells) if isinstance(c, dict) and c.get("cell_type") == "code"
    ]
    if not code:
        return [Problem(display, 1, 1, "cells", "notebook has no code cells")]
    index, first = code[0]
    where = f"cells[{index}]"
    line = _cell_line(text, index)
    tags = (first.get("metadata") or {}).get("tags") or []
    problems: list[Problem] = []
    if "parameters" not in tags:
        problems.append(
            Problem(
                display,
                line,
                1,
                where,
                "the first code cell must be tagged 'parameters' (cell metadata "
                '{"tags": ["parameters"]})',
            )
        )
    try:
        tree = ast.parse(cell_source(first))
    except SyntaxError as exc:
        return [*problems, Problem(display, line, 1, where, f"parameters cell: {exc.msg}")]
    names = {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    missing = [n for n in ("scale", "evidence_dir") if n not in names]
    if missing:
        problems.append(
            Problem(
                display, line, 1, where, f"parameters cell does not define {', '.join(missing)}"
            )
        )
    return problems
