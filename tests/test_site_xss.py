"""Contributed content is data, never code: the two rendering functions with payloads, and a site
built from a repository that is hostile in every field, read back as HTML (no browser needed;
tests/browser/test_site_xss_browser.py loads the same site in Chromium)."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.browser.payload_repo import ENTRY_ID, MARK, build_payload_site
from trainwreck import sanitize, site
from trainwreck.site import text as site_text

pytest.importorskip("nh3")
pytest.importorskip("mkdocs")
pytest.importorskip("material")

md = pytest.importorskip("markdown")


def page_html(fragment: str) -> str:
    """`fragment` placed in a page and rendered with the site's own Markdown extensions."""
    from mkdocs.utils.yaml import yaml_load  # reads mkdocs' own tags (site_url: !ENV ...)

    config = yaml_load((Path(__file__).parents[1] / "mkdocs.yml").read_text())
    extensions = [e if isinstance(e, str) else next(iter(e)) for e in config["markdown_extensions"]]
    return md.markdown(fragment, extensions=extensions)


class Live(HTMLParser):
    """Collects what would run: event-handler attributes, script elements with text, script
    and data: URLs (other than SVG shown as an image), frames and plugins."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            value = (value or "").strip()
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}={value[:50]!r}>")
            lowered = "".join(value.split()).lower()
            if name in ("href", "src", "action", "formaction", "xlink:href", "data"):
                if (
                    lowered.startswith(("javascript:", "vbscript:"))
                    and lowered != "javascript:void(0)"
                ):
                    self.found.append(f"<{tag} {name}={value[:50]!r}>")
                if lowered.startswith("data:") and not (
                    tag == "img" and lowered.startswith("data:image/svg+xml;base64,")
                ):
                    self.found.append(f"<{tag} {name}={value[:50]!r}>")
            if MARK in value and name not in ("alt", "title", "aria-label", "value", "content"):
                self.found.append(f"<{tag} {name}={value[:50]!r}>")
        if tag in ("iframe", "object", "embed", "frame"):
            self.found.append(f"<{tag}>")
        self.in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self.in_script = False

    def handle_data(self, data: str) -> None:
        if self.in_script and MARK in data:
            self.found.append(f"<script>{data[:50]}")


def live(html: str) -> list[str]:
    parser = Live()
    parser.feed(html)
    parser.close()
    return parser.found


# --- the two functions --------------------------------------------------------------------------

PAYLOADS = [
    "<script>fetch('/pwned/a')</script>",
    "<img src=x onerror=\"fetch('/pwned/b')\">",
    "<svg/onload=fetch('/pwned/c')>",
    "<details open ontoggle=fetch('/pwned/d')>",
    "[x](javascript:fetch('/pwned/e'))",
    "[x](JaVaScRiPt&#58;fetch('/pwned/f'))",
    "[x](  java\tscript:fetch('/pwned/g'))",
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "![x](javascript:fetch('/pwned/h'))",
    "`code`{: onclick=\"fetch('/pwned/i')\" }",
    "para {: onmouseover=\"fetch('/pwned/j')\" }",
    "para\n{: onmouseover=\"fetch('/pwned/k')\" }",
    '<div markdown="1" onclick="fetch(\'/pwned/l\')">*x*</div>',
    "<a href=\"javascript:fetch('/pwned/m')\">x</a>",
    "[x](https://a.com/)<svg/onload=fetch('/pwned/n')//x>)",
    "<!-- x --><script>fetch('/pwned/o')</script>",
]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("inline", [True, False])
def test_markdown_payloads_render_inert(payload: str, inline: bool) -> None:
    fragment = sanitize.render_markdown(f"Before {payload} after", inline=inline)
    assert live(fragment) == []
    # Placed in a page and rendered by the site's Markdown (attr_list, md_in_html on), it stays so.
    placed = f"| a |\n|---|\n| {fragment} |\n" if inline else fragment
    assert live(page_html(placed)) == []


@pytest.mark.parametrize("payload", PAYLOADS)
def test_escaped_text_is_shown_exactly_as_written(payload: str) -> None:
    rendered = page_html(f"### {sanitize.escape_text(payload)}")
    assert live(rendered) == []
    assert " ".join(payload.split()) in text_of(rendered)


def text_of(html: str) -> str:
    parser = HTMLParser()
    text: list[str] = []
    parser.handle_data = text.append  # type: ignore[method-assign]
    parser.feed(html)
    return "".join(text)


@pytest.mark.parametrize("inline", [True, False])
def test_markdown_keeps_the_formatting_authors_use(inline: bool) -> None:
    source = "Use **`gc.freeze()`** and see [docs](https://docs.python.org/3/)."
    rendered = html.unescape(page_html(sanitize.render_markdown(source, inline=inline)))
    assert "<strong><code>gc.freeze()</code></strong>" in rendered
    assert 'href="https://docs.python.org/3/"' in rendered
    # Raw HTML is shown as the text it is: placeholders such as <file> survive.
    placeholder = page_html(sanitize.render_markdown("prints <file>.cu:<line>", inline=inline))
    assert "prints <file>.cu:<line>" in text_of(placeholder)


def test_link_schemes_are_http_mailto_and_relative_only() -> None:
    allowed = ("https://a.com/x", "mailto:a@b.c", "../other/index.md", "#anchor")
    blocked = ("javascript:x", " JavaScript:x", "java\tscript:x", "jav&#x61;script:x", "data:x",
               "vbscript:x", "file:///etc/passwd")  # fmt: skip
    for url in allowed:
        assert f'href="{sanitize.escape_attribute(url)}"' in sanitize.render_markdown(f"[x]({url})")
    for url in blocked:
        assert "href" not in sanitize.render_markdown(f"[x]({url})"), url


def test_images_load_only_from_the_page_folder() -> None:
    html = sanitize.render_markdown("![a](https://tracker.example/p.png) ![b](figure-1.png)")
    assert "tracker.example" not in html
    assert 'src="figure&#45;1&#46;png"' in html


@pytest.mark.parametrize(
    "target",
    # (three backslashes are two after Markdown's escapes; two are one: a path of this site)
    ["/\\evil.example/p.png", "\\/evil.example/p.png", "\\\\\\evil.example/p.png",
     "&#47;&#92;evil.example/p.png"],
)  # fmt: skip
def test_a_backslash_cannot_make_an_image_or_link_leave_the_site(target: str) -> None:
    """WHATWG URL parsing turns "\\" into "/" in an http(s) URL, so "/\\host/p.png" is scheme-relative:
    headless Chromium fetched such an image from the other host (audit 3.1)."""
    rendered = sanitize.render_markdown(f"![p]({target}) [l]({target})")
    assert "src=" not in rendered and "href=" not in rendered, rendered


def test_another_host_is_told_as_a_browser_reads_the_url() -> None:
    from trainwreck.markup import network_path

    assert network_path(" \x01/\t\\evil.example") == "/\\"
    assert network_path("//evil.example") == "//"
    assert network_path("&#92;&#92;evil") == "\\\\"
    for same_site in ("/figure.png", "\\figure.png", "figure.png", "#top", "/ \\x"):
        assert network_path(same_site) is None, same_site


def test_fence_language_cannot_carry_attributes() -> None:
    fence = site_text.fenced("x = 1", "python {onclick=fetch('/pwned/x')}")
    assert fence.startswith("```\n")
    assert live(page_html(fence)) == []


def test_svg_output_is_an_image_not_a_file(tmp_path: Path) -> None:
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "source": "plot()",
                "metadata": {},
                "outputs": [
                    {
                        "output_type": "display_data",
                        "data": {"image/svg+xml": "<svg><script>fetch('/pwned/s')</script></svg>"},
                    },
                    {"output_type": "display_data", "data": {"text/html": "<script>x</script>"}},
                    {"output_type": "display_data", "data": {"image/png": "PHNjcmlwdD4="}},
                ],
            }
        ]
    }
    rendered = site.render_notebook(notebook, tmp_path, prefix="figure", show_outputs=True)
    assert list(tmp_path.iterdir()) == []  # nothing of the origin: no .svg, no fake .png
    assert '<img alt="Figure 1 of the executed reproduction" src="data:image/svg+xml;base64,' in (
        rendered.markdown
    )
    assert "<script>x</script>" not in rendered.markdown


# --- the hostile site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_payload_site(tmp_path_factory.mktemp("xss") / "repo")


def test_no_payload_is_live_in_any_page(hostile_site: Path) -> None:
    pages = sorted(hostile_site.rglob("*.html"))
    assert len(pages) >= 10
    found = {str(p.relative_to(hostile_site)): live(p.read_text(encoding="utf-8")) for p in pages}
    assert {page: hits for page, hits in found.items() if hits} == {}


def test_payloads_are_shown_as_text(hostile_site: Path) -> None:
    html = (hostile_site / f"entries/{ENTRY_ID}/index.html").read_text(encoding="utf-8")
    # The title, escaped in the nav, the <title> and the heading; prose fields as text.
    assert "&lt;script&gt;fetch(&#x27;/pwned/title&#x27;)" in html
    assert (
        "&lt;script&gt;fetch(&#x27;/pwned/title&#x27;)"
        in html.split("<title>")[1].split("</title>")[0]
    )
    for field in ("summary", "mechanism", "observed", "why", "check", "expect", "do", "signal",
                  "single_gpu", "note", "q", "a", "rule-description", "nb-markdown",
                  "quick_answer"):  # fmt: skip
        assert f"<script>fetch('/pwned/{field}-script')" in text_of(html), field
    description = html.split('<meta name="description" content="')[1].split('"')[0]
    # The page description is the entry's one-line quick answer, escaped.
    assert "&lt;script&gt;fetch(&#x27;/pwned/quick_answer-script&#x27;)" in description
    index = (hostile_site / "entries/index.html").read_text(encoding="utf-8")
    assert "/pwned/title" in index and live(index) == []


def test_the_fact_check_block_is_shown_as_text(hostile_site: Path) -> None:
    html = (hostile_site / f"entries/{ENTRY_ID}/index.html").read_text(encoding="utf-8")
    assert "tw-review-reviewed" in html  # its digest is current: the date reaches the badge
    shown = text_of(html)
    for field in ("checked-by", "checked-against", "checked-not_verified"):
        assert f"<script>fetch('/pwned/{field}-script')" in shown, field
    assert "<script>fetch('/pwned/checked-date')" in shown
    # A ledger outside docs/audits/<slug>.md is named, never linked.
    assert "/pwned/checked-ledger" in shown
    assert (
        'href="../../audits/' not in html.split('id="fact-check"')[1].split('id="reproduction"')[0]
    )


def test_no_contributed_file_becomes_a_document_of_the_site(hostile_site: Path) -> None:
    page_dir = hostile_site / f"entries/{ENTRY_ID}"
    names = sorted(p.name for p in page_dir.iterdir())
    assert names == ["figure-2.png", "index.html"]  # the real PNG; not the SVG, HTML or fake PNG
    search = json.loads((hostile_site / "search/search_index.json").read_text())
    for doc in search["docs"]:
        assert live(doc["title"]) == [], doc["title"]


def test_reference_url_cannot_end_the_link_early(hostile_site: Path) -> None:
    html = (hostile_site / f"entries/{ENTRY_ID}/index.html").read_text(encoding="utf-8")
    assert "<svg/onload" not in html
    assert 'href="https://a.com/)&lt;svg/onload' in html or "https://a.com/)" in html


def test_headings_with_quotes_and_markup_keep_their_toc_text() -> None:
    toc = md.Markdown(extensions=["toc", "attr_list"])
    heading = site_text.inline_md('it\'s <b>"x"</b> `y`')
    toc.convert(f"### Fix: {heading}")
    token = toc.toc_tokens[0]
    assert html.unescape(token["name"]) == 'Fix: it\'s <b>"x"</b> y'
    assert token["id"] == "fix-its-bxb-y"


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("> 0.9", "> 0.9"),
        (">= 1 (usually)", ">= 1 (usually)"),
        ("1. Calibration", "1. Calibration"),
        ("- a", "- a"),
        ("# x", "# x"),
        ("a\n===", "a ==="),
    ],
)
def test_inline_text_is_never_read_as_a_block(source: str, shown: str) -> None:
    # A threshold "> 0.9" in a table cell is not a quote; a heading "1. Calibration" not a list.
    cell = page_html(f"| a |\n|---|\n| {site_text.inline_md(source)} |\n")
    assert f"<td>{html.escape(shown, quote=False)}</td>" in cell
