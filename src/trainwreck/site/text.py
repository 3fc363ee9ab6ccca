"""Turning contributed text into page Markdown: every helper here escapes or sanitises, so
entry text, rule titles and notebook outputs reach a reader only as text or vetted Markdown."""

from __future__ import annotations

import contextvars
import datetime as _dt
import json
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainwreck.model import Entry
from trainwreck.sanitize import escape_text, render_markdown

# Notebook output shown on a page is capped; the full executed notebook is in build/.
MAX_OUTPUT_LINES = 60
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ids, tags and rule ids become paths and anchors: kebab-case only (the schemas' pattern).
SLUG_RE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# A fence's info string: a language name, never attributes (`{.class onclick=...}`).
LANGUAGE_RE = re.compile(r"[A-Za-z0-9_+#.-]+")


@dataclass
class PageLinks:
    """Resolves relative links in contributed text on one page, as mkdocs does for Markdown
    links (mkdocs never sees links inside HTML): `x.md` becomes the page's URL, and a link to
    no page is recorded as a problem of the source file."""

    page: str  # the page's path in the docs dir, e.g. "entries/nan-loss/index.md"
    source: str  # the file the text came from, for the problem
    pages: set[str]  # every page of the site, as paths in the docs dir
    broken: list[str]

    def __call__(self, href: str) -> str | None:
        path, hash_, fragment = href.partition("#")
        if not path.endswith(".md"):
            return href
        base = posixpath.dirname(self.page)
        target = posixpath.normpath(posixpath.join(base, path))
        if target not in self.pages:
            self.broken.append(f"{self.source}: link '{href}' points to no page of the site")
            return None
        # use_directory_urls: "a/b.md" is served at "a/b/", "a/index.md" at "a/".
        folder = (
            target[: -len("index.md")]
            if posixpath.basename(target) == "index.md"
            else target[:-3] + "/"
        )
        relative = posixpath.relpath(folder or ".", base or ".")
        url = "./" if relative == "." else relative.rstrip("/") + "/"
        return url + (hash_ + fragment if hash_ else "")


def drop_page_links(href: str) -> str | None:
    return None if href.partition("#")[0].endswith(".md") else href


# The links resolver of the page being rendered (None: relative links are kept as written).
PAGE_LINKS: contextvars.ContextVar[Callable[[str], str | None] | None] = contextvars.ContextVar(
    "trainwreck_page_links", default=None
)


def inline_md(text: Any) -> str:
    """Contributed inline Markdown (a table cell, heading, list item or bold-led line): sanitised
    inline HTML on one line, pipes and every other Markdown character inert."""
    return render_markdown(text, inline=True, links=PAGE_LINKS.get())


def plain(text: Any) -> str:
    """Contributed plain text (titles, labels, file names): shown exactly as written."""
    return escape_text(text)


def code_span(text: Any) -> str:
    """An inline code span for `text` (which may itself hold backticks), on one line."""
    value = " ".join(str(text).split())
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def fenced(code: str, language: str = "", indent: str = "") -> str:
    """A fenced code block longer than any backtick run inside `code`."""
    code = code.rstrip("\n")
    language = language if LANGUAGE_RE.fullmatch(language) else ""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    lines = [f"{ticks}{language}", *code.split("\n"), ticks]
    return "\n".join((indent + line) if line else line for line in lines)


def indented(text: str, prefix: str = "    ") -> str:
    return "\n".join((prefix + line) if line.strip() else "" for line in text.split("\n"))


def prose(text: Any) -> str:
    """Contributed prose (Markdown allowed) as a sanitised HTML block; it must start a line of
    its own at the top level of the page (inline places use `inline_md`)."""
    return render_markdown(text, links=PAGE_LINKS.get())


def first_sentence(text: str, limit: int | None = None) -> str:
    """The first sentence of `text`: a full stop inside a quoted message, a code span or
    brackets does not end it ("CUDA out of memory. Tried to allocate ..." stays one phrase).
    With `limit`, a longer sentence is cut there with an ellipsis (for error messages)."""
    sentence = _whole_first_sentence(" ".join(str(text).split()))
    if limit is None or len(sentence) <= limit:
        return sentence
    return sentence[: limit - 1].rstrip() + "…"


def _whole_first_sentence(flat: str) -> str:
    closers = {"(": ")", "[": "]"}
    stack: list[str] = []
    for index, char in enumerate(flat):
        if stack and char == stack[-1]:
            stack.pop()
        elif char in ('"', "`") and not (stack and stack[-1] == "`"):
            stack.append(char)
        elif char in closers and not (stack and stack[-1] in ('"', "`")):
            stack.append(closers[char])
        elif char in ".!?" and not stack and (index + 1 == len(flat) or flat[index + 1] == " "):
            return flat[: index + 1]
    return flat


def summary_line(entry: Entry) -> str:
    """What a row or card shows for an entry: its one-line quick answer (entries written before
    the field existed fall back to the first whole sentence of the summary)."""
    quick = entry.data.get("quick_answer")
    if isinstance(quick, str) and quick.strip():
        return " ".join(quick.split())
    return first_sentence(entry.data.get("summary", entry.title))


def yaml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def human_date(iso: str | None) -> str:
    """'2026-11-30T01:23:45+00:00' -> '2026-11-30 01:23 UTC' (or the raw text)."""
    if not iso:
        return "an unknown date"
    try:
        moment = _dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return str(iso)
    if moment.tzinfo is not None:
        moment = moment.astimezone(_dt.timezone.utc)
        return moment.strftime("%Y-%m-%d %H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M")


def clip(text: str, max_lines: int = MAX_OUTPUT_LINES) -> str:
    lines = text.rstrip("\n").split("\n")
    if len(lines) <= max_lines:
        return "\n".join(lines)
    head = max_lines * 2 // 3
    tail = max_lines - head
    omitted = len(lines) - head - tail
    return "\n".join([*lines[:head], f"... ({omitted} lines omitted) ...", *lines[-tail:]])
