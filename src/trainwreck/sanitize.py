"""Untrusted text on the site, and in reports: the only ways it reaches a reader.

Entries, rules and notebooks arrive by pull request from strangers, so their text is data, never
markup. The site writes pages as Markdown that mkdocs renders (with attr_list, md_in_html and raw
HTML enabled for our own templates), and every contributed string goes through one of:

- `escape_text(value)`: plain text (titles, labels, tags, file names). HTML-special characters
  become entities and Markdown-active characters are backslash-escaped, so the page's Markdown
  renders it as the same characters and nothing else: no tag, link, emphasis, attribute list.
- `render_markdown(value, inline=...)`: prose. It is rendered by a separate Markdown instance with
  raw HTML switched off and no attr_list, the HTML is cleaned by nh3 (ammonia's allow-list:
  known tags and attributes only, links limited to http(s), mailto and relative URLs, images
  to relative URLs), then re-serialised with every Markdown-active character as a character
  reference, so the page's own Markdown pass cannot reinterpret it.

`inline=True` is for table cells, headings, list items and labels: inline tags only, on one line.
Block output (paragraphs, lists, code) must start a line of its own in the page, where mkdocs'
Markdown keeps an HTML block as it is.

Outside the site, text from logs, file names, pull requests, rule packs and notebook errors
reaches a terminal (`diagnose`'s text report), GitHub Markdown (`diagnose --format markdown`,
which the action appends to the job summary) or the review bot's pull-request comment, always
through one function:

- `report_text(value, form)`: on one line, with control characters (C0, DEL, C1) and the
  bidirectional controls shown as escapes (`\\x1b`, `\\u202e`); `form="markdown"` also makes
  HTML and Markdown syntax inert, and `form="code"` puts it in an inline code span that it
  cannot close (no HTML, link, image, heading, emphasis, autolink or @mention inside it).

Python-Markdown and nh3 come with the `site` extra and are imported on first use.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from functools import cache
from html.parser import HTMLParser
from typing import Any

from trainwreck.markup import LINK_SCHEMES, link_scheme, network_path

# Characters that Python-Markdown (with the tables extension) treats as syntax and accepts a
# backslash escape for; a backslash before any other character would be shown.
_MARKDOWN_ESCAPABLE = "\\`*_{}[]()>#+-.!|"
_ESCAPE_RE = re.compile("[" + re.escape(_MARKDOWN_ESCAPABLE) + "]")

# In sanitised HTML, characters that any Markdown pattern could pick up become numeric
# character references: the browser shows the same character, mkdocs' Markdown sees none.
_REFERENCE_CHARS = frozenset("\\`*_{}[]()#+-.!|~^:=$<>&\"'")

INLINE_TAGS = frozenset(
    {"a", "abbr", "b", "br", "cite", "code", "del", "em", "i", "kbd", "mark", "q", "s",
     "samp", "small", "strong", "sub", "sup", "u", "var"}
)  # fmt: skip
BLOCK_TAGS = INLINE_TAGS | frozenset(
    {"blockquote", "dd", "div", "dl", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "img",
     "li", "ol", "p", "pre", "table", "tbody", "td", "th", "thead", "tr", "ul"}
)  # fmt: skip
ATTRIBUTES = {
    "a": {"href"},
    "img": {"src", "alt"},
    "ol": {"start"},
    "code": {"class"},
    "td": {"align"},
    "th": {"align"},
}


# Shown as escapes wherever untrusted text reaches a reader outside the site: C0 controls but the
# tab (a newline forges a report line, ESC drives the terminal), DEL, C1 controls (U+009B is a
# CSI to many terminals) and the bidirectional controls, which reorder what a reader sees
# ("d\u202etxt.gol" shows as "dlog.txt").
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
REPORT_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))},
    **{ord(c): f"\\u{ord(c):04x}" for c in BIDI_CONTROLS},
}
REPORT_FORMS = ("text", "markdown", "code")
# What GitHub Flavored Markdown reads as syntax in prose (CommonMark's backslash escapes cover
# all ASCII punctuation; "~" is GFM's strikethrough).
_GFM_ESCAPE_RE = re.compile(r"[\\`*_{}\[\]()#+\-.!|~>]")


def report_text(value: Any, form: str = "text", *, limit: int | None = None) -> str:
    """Untrusted text as a report shows it, on one line; idempotent (its escapes are plain
    characters). `form`:

    - "text", for a terminal: control and bidirectional characters as escapes;
    - "markdown", for prose in GitHub Markdown: also HTML-special characters as entities and
      Markdown-active ones backslash-escaped, so it renders as the same characters;
    - "code", for GitHub Markdown as an inline code span: fenced by more backticks than it holds,
      with "|" escaped (a table row ends a cell at any bare "|", even in code).

    `limit` cuts the text (after escaping) at that many characters, marked with "…".
    """
    if form not in REPORT_FORMS:
        raise ValueError(f"unknown report form {form!r} (one of {', '.join(REPORT_FORMS)})")
    text = str(value).translate(REPORT_ESCAPES)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    if form == "markdown":
        return _GFM_ESCAPE_RE.sub(lambda m: "\\" + m.group(0), _escape_html(text))
    if form == "code":
        text = text.replace("|", "\\|")
        fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
        if not text.strip(" "):
            return f"{fence}{text or ' '}{fence}"  # all spaces: CommonMark strips none
        pad = " " if text[0] in "` " or text[-1] in "` " else ""
        return f"{fence}{pad}{text}{pad}{fence}"
    return text


class SanitizerMissing(ImportError):
    """nh3 or Python-Markdown is not installed (they come with the `site` extra)."""


def escape_text(value: Any) -> str:
    """Plain text for any inline place of a Markdown page, shown exactly as written."""
    flat = " ".join(str(value).split())
    return _ESCAPE_RE.sub(lambda m: "\\" + m.group(0), _escape_html(flat))


def escape_attribute(value: Any) -> str:
    """Plain text for an HTML attribute value, or the text of an element written as raw HTML,
    inside a Markdown page: every Markdown-active character as a character reference."""
    flat = " ".join(str(value).split())
    return "".join(_reference(c) if c in _REFERENCE_CHARS else c for c in flat)


LinkResolver = Callable[[str], "str | None"]


def render_markdown(value: Any, *, inline: bool = False, links: LinkResolver | None = None) -> str:
    """Contributed Markdown as sanitised HTML that the page's Markdown leaves as it is.

    `links` sees each relative link target and returns the href to use (None drops the link,
    keeping its text): mkdocs never sees links inside HTML, so the caller resolves them."""
    source = str(value).strip()
    if not source:
        return ""
    if inline:
        source = " ".join(source.split())
    rendered = _markdown(inline).reset().convert(source)
    if inline:
        single = re.fullmatch(r"<p>(.*)</p>", rendered, re.DOTALL)
        if single and "<p>" not in single.group(1):
            rendered = single.group(1)
    cleaned = _clean(rendered, INLINE_TAGS if inline else BLOCK_TAGS, links)
    return _Inert(inline).feed_all(cleaned)


# --- internals -------------------------------------------------------------------------------


def _escape_html(text: str) -> str:
    """&, <, > and " as named entities: no "#" in them for a Markdown escape to break."""
    return html.escape(text, quote=False).replace('"', "&quot;")


def _reference(char: str) -> str:
    return f"&#{ord(char)};"


@cache
def _markdown(inline: bool = False) -> Any:
    """Python-Markdown for contributed prose, no raw HTML. Blocks: tables and fenced code too.
    Inline: one paragraph, so "> 0.9" in a table cell or "1. Calibration" in a heading stay
    text instead of becoming a quote or a list."""
    try:
        import markdown
    except ImportError as exc:
        raise SanitizerMissing(
            "rendering contributed text needs Python-Markdown: pip install 'trainwreck[site]'"
        ) from exc
    md = markdown.Markdown(extensions=[] if inline else ["tables", "fenced_code"])
    # Raw HTML in contributed text is shown as text, never passed through.
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    if inline:
        for name in ("indent", "code", "hashheader", "setextheader", "hr", "olist", "ulist",
                     "quote", "reference"):  # fmt: skip
            md.parser.blockprocessors.deregister(name, strict=False)
    return md


def _clean(rendered: str, tags: frozenset[str], links: LinkResolver | None) -> str:
    try:
        import nh3
    except ImportError as exc:
        raise SanitizerMissing(
            "rendering contributed text needs nh3: pip install 'trainwreck[site]'"
        ) from exc
    return nh3.clean(
        rendered,
        tags=set(tags),
        attributes={tag: set(names) for tag, names in ATTRIBUTES.items() if tag in tags},
        url_schemes=set(LINK_SCHEMES),
        attribute_filter=lambda tag, name, value: _attribute_filter(tag, name, value, links),
        link_rel="noopener noreferrer",
    )


def _attribute_filter(
    tag: str, attribute: str, value: str, links: LinkResolver | None
) -> str | None:
    if attribute in ("href", "src"):
        # Judged as a browser reads it (tabs and newlines dropped, entities decoded), not as
        # written: "java\tscript:" is a javascript: URL to a browser.
        scheme = link_scheme(value)
        if scheme is not None and scheme not in LINK_SCHEMES:
            return None
        value = "".join(c for c in value if c not in "\t\n\r")
        other_host = network_path(value)
        relative = scheme is None and other_host is None
        if other_host is not None and "\\" in other_host:
            return None  # "/\\host": another host dressed as a path
        if tag == "img":
            # Images only from the page's own folder: no tracking pixels, no data: documents.
            return value if relative else None
        if relative and links is not None and not value.startswith("#"):
            return links(value)
        return value
    if tag == "code" and attribute == "class":
        return value if re.fullmatch(r"language-[\w+#.-]+", value) else None
    if tag in ("td", "th") and attribute == "align":
        return value if value in ("left", "right", "center") else None
    if tag == "ol" and attribute == "start":
        return value if value.isdigit() else None
    return value


class _Inert(HTMLParser):
    """Re-serialises nh3's output with Markdown-active characters as character references.

    nh3 decides what is allowed; this only changes how the allowed result is spelled."""

    def __init__(self, inline: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.inline = inline
        self.out: list[str] = []
        self.pre = 0

    def feed_all(self, text: str) -> str:
        self.feed(text)
        self.close()
        result = "".join(self.out)
        if self.inline:
            return " ".join(result.split())
        # One line per top-level element, no blank line inside: mkdocs keeps it as one block.
        return "\n".join(line for line in result.split("\n") if line.strip())

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]]) -> str:
        parts = [tag]
        for name, value in attrs:
            parts.append(f'{name}="{escape_attribute(value or "")}"')
        return "<" + " ".join(parts) + ">"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "pre":
            self.pre += 1
        self.out.append(self._tag(tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.append(self._tag(tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.pre:
            # Line breaks inside code survive as references; the block stays one Markdown block.
            self.out.append(
                "".join(
                    "&#10;" if c == "\n" else _reference(c) if c in _REFERENCE_CHARS else c
                    for c in data
                )
            )
        elif self.inline:
            # Inline HTML is always processed by the page's inline patterns: backslash escapes
            # come out as the plain characters (a "|" stays "|" in the HTML, as before).
            flat = _escape_html(data.replace("\n", " "))
            self.out.append(_ESCAPE_RE.sub(lambda m: "\\" + m.group(0), flat))
        elif data.strip():
            self.out.append(
                "".join(
                    _reference(c) if c in _REFERENCE_CHARS else c for c in data.replace("\n", " ")
                )
            )
        elif data:
            self.out.append("\n" if "\n" in data and not self.inline else " ")
