"""Contributed text in the review's Markdown: ids, paths and problems as inline code."""

from __future__ import annotations

from typing import Any

from trainwreck.model import Problem


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
