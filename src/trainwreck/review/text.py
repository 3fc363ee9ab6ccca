"""Contributed text in the review's Markdown: ids, paths, problems and statuses as inline code
(sanitize.report_text): the comment is posted by the bot, so nothing from the pull request may
become a heading, a link, an image, HTML or an @mention in it."""

from __future__ import annotations

from typing import Any

from trainwreck.model import Problem
from trainwreck.sanitize import report_text

MAX_SHOWN = 300  # characters of one contributed string in the comment


def _code(text: Any) -> str:
    """Contributed text as an inline code span, safe in a table cell and in prose."""
    return report_text(text, "code", limit=MAX_SHOWN)


def _problem_text(problem: Problem) -> str:
    return _code(str(problem))


def _entries_list(found: list[str] | None) -> str:
    if found is None:
        return "(no such log)"
    return ", ".join(_code(e) for e in found) if found else "no finding"
