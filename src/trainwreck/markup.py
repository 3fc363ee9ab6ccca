"""Markup in contributed text: what `trainwreck check` refuses before the site ever sees it.

The site shows contributed text only as escaped text or sanitised Markdown (trainwreck.sanitize,
with nh3), so none of this can run on a page. Check reports it anyway, at its file:line:col,
because a contributor who writes it expects it to do something, and a reviewer should see it:

- raw HTML: a tag of a real HTML element (`<script>`, `<img ...>`, `</div>`), a comment,
  a processing instruction or CDATA section; placeholders such as `<file>` or `<rank>` are text;
- an event-handler attribute (`onload=`) in anything shaped like a tag;
- a link or image whose target is not http(s), mailto or relative (`javascript:`, `data:`,
  `vbscript:` ...), judged as a browser reads the URL (entities decoded, tabs dropped), or that
  looks relative but leaves the site (`/\\host/p.png`: a browser reads a backslash as a slash);
- attribute lists (`{: ...}`, `{ .class }`, `{ #id }`, `{ key=value }`), which the site's
  Markdown would apply to its own elements.

Text inside code spans and fenced code blocks is code and is not judged. Only the standard
library is used: this runs in the core install.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

from trainwreck.model import Document, Path_, Problem

LINK_SCHEMES = ("http", "https", "mailto")

# WHATWG HTML elements plus the two that open foreign content (svg, math).
HTML_ELEMENTS = frozenset(
    [
        "a",
        "abbr",
        "address",
        "area",
        "article",
        "aside",
        "audio",
        "b",
        "base",
        "bdi",
        "bdo",
        "blockquote",
        "body",
        "br",
        "button",
        "canvas",
        "caption",
        "cite",
        "code",
        "col",
        "colgroup",
        "data",
        "datalist",
        "dd",
        "del",
        "details",
        "dfn",
        "dialog",
        "div",
        "dl",
        "dt",
        "em",
        "embed",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "head",
        "header",
        "hgroup",
        "hr",
        "html",
        "i",
        "iframe",
        "img",
        "input",
        "ins",
        "kbd",
        "label",
        "legend",
        "li",
        "link",
        "main",
        "map",
        "mark",
        "menu",
        "meta",
        "meter",
        "nav",
        "noscript",
        "object",
        "ol",
        "optgroup",
        "option",
        "output",
        "p",
        "picture",
        "pre",
        "progress",
        "q",
        "rp",
        "rt",
        "ruby",
        "s",
        "samp",
        "script",
        "search",
        "section",
        "select",
        "slot",
        "small",
        "source",
        "span",
        "strong",
        "style",
        "sub",
        "summary",
        "sup",
        "table",
        "tbody",
        "td",
        "template",
        "textarea",
        "tfoot",
        "th",
        "thead",
        "time",
        "title",
        "tr",
        "track",
        "u",
        "ul",
        "var",
        "video",
        "wbr",
        "frame",
        "frameset",
        "noframes",
        "marquee",
        "blink",
        "center",
        "font",
        "applet",
        "basefont",
        "xmp",
        "listing",
        "plaintext",
        "image",
        "svg",
        "math",
    ]
)

_FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_CODE_SPAN_RE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
_TAG_RE = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?=[\s/>])([^<>]*)>?")
_HANDLER_RE = re.compile(r"(?:^|[\s/\"'])(on[a-z]+)\s*=", re.I)
_OTHER_MARKUP_RE = re.compile(r"<!--|<!\[CDATA\[|<\?[A-Za-z]|<![A-Za-z]")
_LINK_RE = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\n]*)")
_REFERENCE_DEFINITION_RE = re.compile(r"^[ ]{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_AUTOLINK_RE = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]*:[^\s<>]*)>")
_ATTR_LIST_RE = re.compile(r"\{:?[ \t]*(?:[#.][A-Za-z_][\w-]*|[A-Za-z_][\w:-]*[ \t]*=)[^}\n]*\}")
# A fence's info string is a language name, never attributes.
LANGUAGE_RE = re.compile(r"[A-Za-z0-9_+#.-]+")
# Characters a URL may hold unencoded (RFC 3986); anything else must be %-encoded.
_URL_CHARS_RE = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")


def _blank_code(text: str) -> str:
    """`text` with fenced blocks and code spans replaced by spaces (positions kept)."""

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    return _CODE_SPAN_RE.sub(blank, _FENCE_RE.sub(blank, text))


def link_scheme(url: str) -> str | None:
    """The scheme a browser would see in `url` (entities decoded, whitespace and control
    characters dropped, lower case), or None for a relative link."""
    decoded = html.unescape(url)
    squeezed = "".join(c for c in decoded if c > " " and c != "\x7f").lower()
    match = re.match(r"([a-z][a-z0-9+.\-]*):", squeezed)
    return match.group(1) if match else None


def network_path(url: str) -> str | None:
    """The start of `url` when a browser reads it (no scheme) as a link to another host: two
    slashes, or a slash and a backslash in either order, or two backslashes (WHATWG URL parsing
    turns "\\" into "/" in an http(s) URL, strips leading spaces and control characters and
    drops tabs and newlines anywhere, after the HTML attribute's entities are decoded). None for
    a link within the site."""
    decoded = "".join(c for c in html.unescape(url) if c not in "\t\n\r")
    start = decoded.lstrip("".join(map(chr, range(0x21))))[:2]
    return start if len(start) == 2 and set(start) <= {"/", "\\"} else None


def markup_findings(text: str) -> list[str]:
    """What in `text` would be markup rather than text, one phrase each (in order)."""
    prose = _blank_code(text)
    found: list[tuple[int, str]] = []
    closing_tags: list[tuple[int, str]] = []  # reported only when nothing else is
    for match in _TAG_RE.finditer(prose):
        closing, name, rest = match.groups()
        handler = _HANDLER_RE.search(rest)
        if handler:
            attribute = handler.group(1).lower()
            found.append((match.start(), f"an event handler attribute '{attribute}' in <{name}>"))
        elif name.lower() in HTML_ELEMENTS:
            tags = closing_tags if closing else found
            tags.append((match.start(), f"raw HTML <{closing}{name.lower()}>"))
    for match in _OTHER_MARKUP_RE.finditer(prose):
        found.append((match.start(), f"raw HTML '{match.group(0)}'"))
    for pattern in (_LINK_RE, _REFERENCE_DEFINITION_RE, _AUTOLINK_RE):
        for match in pattern.finditer(prose):
            scheme = link_scheme(match.group(1))
            if scheme is not None and scheme not in LINK_SCHEMES:
                found.append((match.start(), f"a link to a '{scheme}:' URL"))
            elif scheme is None and "\\" in (start := network_path(match.group(1)) or ""):
                found.append(
                    (
                        match.start(),
                        f"a link to another host written as '{start}' "
                        "(a browser reads '\\' as '/')",
                    )
                )
    for match in _ATTR_LIST_RE.finditer(prose):
        shown = " ".join(match.group(0).split())
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        found.append((match.start(), f"an attribute list '{shown}'"))
    return [message for _, message in sorted(found or closing_tags)]


def url_problem(url: str) -> str | None:
    """Why `url` is not a well-formed absolute http(s) URL with a real-looking host, or None."""
    from urllib.parse import urlsplit

    if not url:
        return "the URL is empty"
    if not _URL_CHARS_RE.fullmatch(url):
        bad = next(c for c in url if not _URL_CHARS_RE.fullmatch(c))
        return f"'{url}' is not a well-formed http(s) URL ({bad!r} must be %-encoded)"
    depth = 0
    for char in url:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
    if depth != 0:
        return f"'{url}' is not a well-formed http(s) URL (unbalanced parentheses)"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return f"'{url}' is not a well-formed http(s) URL"
    if parts.scheme not in ("http", "https") or "." not in host:
        return f"'{url}' is not a well-formed http(s) URL"
    return None


def markup_problems(document: Document, *, code_keys: tuple[str, ...] = ("code",)) -> list[Problem]:
    """Markup in every string of `document` (values under `code_keys` are code: not judged),
    and fence languages that are not a plain language name."""
    problems = []
    for path, value in _strings(document.data, ()):
        key = path[-1] if path else ""
        if key in code_keys or key == "url":  # code is code; URLs have their own check
            continue
        if key == "language":
            if not LANGUAGE_RE.fullmatch(value):
                problems.append(
                    document.problem(path, f"'{value}' is not a language name ([A-Za-z0-9_+#.-])")
                )
            continue
        for message in markup_findings(value):
            problems.append(
                document.problem(
                    path,
                    f"{message} is not allowed in contributed text{_HINTS.get(message.split()[1], '')}",
                )
            )
    return problems


def rule_markup_problems(document: Document) -> list[Problem]:
    """Markup in a rule's text shown on the site: its title, description and the values its
    JSON matchers compare (regexes and conditions are shown as code)."""
    data = document.data if isinstance(document.data, dict) else {}
    texts: list[tuple[Path_, Any]] = [
        (("title",), data.get("title")),
        (("description",), data.get("description")),
    ]
    matchers = data.get("matchers")
    for name, spec in matchers.items() if isinstance(matchers, dict) else []:
        fields = spec.get("json") if isinstance(spec, dict) else None
        for field, value in fields.items() if isinstance(fields, dict) else []:
            texts.append((("matchers", name, "json", field), value))
    return [
        document.problem(
            path,
            f"{message} is not allowed in contributed text{_HINTS.get(message.split()[1], '')}",
        )
        for path, value in texts
        if isinstance(value, str)
        for message in markup_findings(value)
    ]


def notebook_markup_problems(text: str, display: str) -> list[Problem]:
    """Markup in the markdown cells of a notebook (its JSON `text`), each at the line and column
    where its cell starts; a notebook that is not valid JSON is reported elsewhere."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return []
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return []
    # nbformat writes "cell_type" once per cell, in order: the position of each cell.
    starts = [m.start() for m in re.finditer(r'"cell_type"\s*:', text)]
    problems = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        offset = starts[index] if index < len(starts) else 0
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        for message in markup_findings(source):
            hint = _HINTS.get(message.split()[1], "")
            problems.append(
                Problem(
                    display,
                    line,
                    column,
                    f"cells[{index}]",
                    f"{message} is not allowed in a markdown cell{hint}",
                )
            )
    return problems


# What to write instead, by the second word of the finding.
_HINTS = {
    "link": " (links are http(s), mailto or relative)",
    "HTML": " (write Markdown; a tag meant as text goes in `backticks`)",
}


def _strings(data: Any, path: Path_) -> Iterator[tuple[Path_, str]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, (*path, index))
    elif isinstance(data, str):
        yield path, data
