"""What is wrong with an entry's reproduction notebook, for `trainwreck check`.

Standard library only (nbformat's schema check runs when the repro extra is installed): the core
install's `check` imports this module.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from trainwreck.model import Entry, Problem, Reproduction, display_path, format_path
from trainwreck.reproduce.recordings import recording_problems
from trainwreck.reproduce.source import cell_source
from trainwreck.reproduce.targets import notebook_file


def notebook_problems(entry: Entry, root: Path) -> list[Problem]:
    """What is wrong with an entry's reproduction notebooks and GPU recordings, as Problems:
    each reproduction's notebook, and (for the list form) at most one reproduction per device.

    Needs only the standard library (nbformat's schema check runs when it is installed).
    """
    root = Path(root)
    reproductions = entry.reproductions
    if not reproductions:
        return [_no_notebook(entry, ("reproduction",) if "reproduction" in entry.data else ())]
    problems = _device_problems(entry, reproductions)
    for reproduction in reproductions:
        problems.extend(_reproduction_problems(entry, reproduction, root))
    return problems


def _no_notebook(entry: Entry, path: tuple[str | int, ...]) -> Problem:
    return entry.document.problem(
        path,
        "no reproduction notebook: set reproduction.notebook and device, or "
        "reproduction.not_reproducible with the reason",
    )


def _device_problems(entry: Entry, reproductions: list[Reproduction]) -> list[Problem]:
    """A list names each device once, and each notebook once (the notebook names the run)."""
    problems: list[Problem] = []
    devices: dict[str, Reproduction] = {}
    ids: dict[str, Reproduction] = {}
    for reproduction in reproductions:
        device = "none" if reproduction.not_reproducible is not None else reproduction.device
        first = devices.setdefault(device, reproduction)
        if first is not reproduction:
            what = "not_reproducible" if device == "none" else f"device {device}"
            problems.append(
                entry.document.problem(
                    reproduction.path,
                    f"a second reproduction with {what} (the first is "
                    f"{format_path(first.path)}): an entry has at most one reproduction per "
                    "device",
                )
            )
            continue
        earlier = ids.setdefault(reproduction.id, reproduction)
        if earlier is not reproduction:
            problems.append(
                entry.document.problem(
                    reproduction.path,
                    f"reproduction id {reproduction.id!r} is also {format_path(earlier.path)}'s: "
                    "each reproduction needs its own notebook (its file stem names its run)",
                )
            )
    return problems


def _reproduction_problems(entry: Entry, reproduction: Reproduction, root: Path) -> list[Problem]:
    if reproduction.not_reproducible is not None:
        return []
    doc = entry.document
    notebook = reproduction.notebook
    if not notebook:
        return [_no_notebook(entry, reproduction.path)]
    try:
        path = notebook_file(root, notebook)
    except ValueError as exc:
        return [doc.problem((*reproduction.path, "notebook"), str(exc))]
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
    problems.extend(recording_problems(reproduction.id, root, data, reproduction.data))
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
