"""The site as a person sees it: `trainwreck build` on a small repository (its notebook really
executed), served on localhost and opened in headless Chromium.

Checks that the home page and an entry page display the title, the symptoms table, the fix and
the notebook's figure, and that the in-page search finds the entry by a word of its fix.
Screenshots go to test-artifacts/. Without Chromium the test is skipped, except in CI (CI=true),
where it fails.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.browser.cdp import Browser
from tests.browser.fixture_repo import FIX_WORD, REPO, make_repo
from tests.browser.serving import require_chromium, require_modules, serving
from trainwreck import site
from trainwreck.cli import main

ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Build the fixture repository for real and serve its site/ on 127.0.0.1."""
    require_chromium()
    require_modules("mkdocs", "material", "nbclient", "matplotlib")
    root = make_repo(tmp_path_factory.mktemp("browser") / "repo")
    # The real build: check -> reproduce (executes the notebook) -> compile -> site.
    assert main(["build", "--root", str(root)]) == 0
    manifest = json.loads((root / "build/manifest.json").read_text())
    record = next(r for r in manifest["notebooks"] if r["id"] == "demo-straggler")
    assert record["status"] == "passed"
    with serving(site.make_server(root / "site")) as url:
        yield url


@pytest.fixture(scope="module")
def browser(served: str) -> Iterator[Browser]:
    with Browser(require_chromium()) as chromium:
        yield chromium


VISIBLE = """
(el) => {
  if (!el) return false;
  el.scrollIntoView({block: 'center'});
  const box = el.getBoundingClientRect();
  const style = getComputedStyle(el);
  return box.width > 0 && box.height > 0 && style.visibility !== 'hidden' && style.display !== 'none';
}
"""


def visible(browser: Browser, selector_js: str) -> bool:
    return bool(browser.evaluate(f"({VISIBLE})({selector_js})"))


def test_home_page(browser: Browser, served: str) -> None:
    browser.open(f"{served}/")
    assert browser.evaluate("document.querySelector('article h1').textContent.trim()").startswith(
        "Trainwreck"
    )
    assert visible(browser, "document.querySelector('article h1')")
    text = browser.evaluate("document.querySelector('article').innerText")
    assert "executable encyclopedia" in text
    assert "trainwreck diagnose" in text
    # The nav reaches the generated pages.
    links = browser.evaluate(
        "[...document.querySelectorAll('nav a')].map(a => a.getAttribute('href'))"
    )
    assert any("entries/demo-straggler/" in link for link in links)
    browser.evaluate("window.scrollTo(0, 0)")
    browser.screenshot(ARTIFACTS / "home.png")


def test_entry_page_shows_title_symptoms_fix_and_figure(browser: Browser, served: str) -> None:
    browser.open(f"{served}/entries/demo-straggler/")
    title = browser.evaluate("document.querySelector('article h1').textContent")
    assert "Demo straggler stalls every rank" in title
    assert visible(browser, "document.querySelector('article h1')")

    headers = browser.evaluate(
        "[...document.querySelectorAll('article table th')].map(th => th.textContent.trim())"
    )
    assert "What you observe" in headers and "Why it happens" in headers
    table = "document.evaluate(\"//th[normalize-space()='What you observe']/ancestor::table\", document, null, 9, null).singleNodeValue"
    assert visible(browser, table)
    rows = browser.evaluate(f"{table}.querySelectorAll('tbody tr').length")
    assert rows == 2

    fix = "document.getElementById('primary-fix-freeze-the-heap-to-unclog-the-ranks')"
    assert visible(browser, fix)
    assert "gc.freeze()" in browser.evaluate("document.querySelector('article').innerText")

    status = browser.evaluate("document.querySelector('article').innerText")
    assert "Reproduced on" in status and "fingerprint asserted" in status

    figure = "document.querySelector('article img[src=\"figure-1.png\"]')"
    assert visible(browser, figure)
    # Loaded and decoded: a real matplotlib figure, not a broken-image icon.
    size = browser.wait_for(
        f"{figure}.complete && {figure}.naturalWidth > 0 && [{figure}.naturalWidth, {figure}.naturalHeight]"
    )
    assert size[0] >= 300 and size[1] >= 150
    with urllib.request.urlopen(f"{served}/entries/demo-straggler/figure-1.png") as reply:
        assert reply.read(8) == b"\x89PNG\r\n\x1a\n"
    browser.screenshot(ARTIFACTS / "entry-figure.png", full_page=False)
    # Code blocks get their copy buttons (added by the theme's JavaScript).
    assert (
        browser.wait_for(
            "document.querySelectorAll('article button[data-md-type=copy], article button.md-clipboard').length"
        )
        >= 3
    )
    browser.evaluate("window.scrollTo(0, 0)")
    time.sleep(0.5)  # let the header finish its scroll transition
    browser.screenshot(ARTIFACTS / "entry.png")


def test_search_finds_the_entry_by_a_word_of_its_fix(browser: Browser, served: str) -> None:
    browser.open(f"{served}/")
    # Open the search box as a person does (click), then type into it.
    browser.evaluate(
        "document.querySelector('label.md-search__icon, .md-header__button[for=__search]').click()"
    )
    browser.wait_for(
        "document.activeElement && document.activeElement.matches('input.md-search__input') || (document.querySelector('input.md-search__input').focus(), false)"
    )
    browser.type_text(FIX_WORD)
    hrefs = browser.wait_for(
        "(() => { const a = [...document.querySelectorAll('.md-search-result__item a')]"
        ".map(x => x.getAttribute('href')); return a.length ? a : null; })()",
        timeout=30,
    )
    assert any("entries/demo-straggler/" in href for href in hrefs), hrefs
    browser.screenshot(ARTIFACTS / "search.png", full_page=False)
    # The same search as a shared link (?q=) shows the same entry.
    browser.open(f"{served}/?q={FIX_WORD}")
    hrefs = browser.wait_for(
        "(() => { const a = [...document.querySelectorAll('.md-search-result__item a')]"
        ".map(x => x.getAttribute('href')); return a.length ? a : null; })()",
        timeout=30,
    )
    assert any("entries/demo-straggler/" in href for href in hrefs), hrefs


def test_dark_palette(browser: Browser, served: str) -> None:
    browser.call(
        "Emulation.setEmulatedMedia",
        features=[{"name": "prefers-color-scheme", "value": "dark"}],
    )
    try:
        # The theme remembers the palette of earlier visits; start as a new visitor would. The
        # page itself clears its storage (synchronously, unlike a DevTools storage call), then
        # loads again.
        page = f"{served}/entries/demo-straggler/"
        browser.open(page)
        browser.evaluate("localStorage.clear(), sessionStorage.clear(), true")
        # The preference again, right before the new visit (a loaded CI machine once showed the
        # page still light after 20 s), and a longer wait: the scheme must still switch.
        browser.call(
            "Emulation.setEmulatedMedia",
            features=[{"name": "prefers-color-scheme", "value": "dark"}],
        )
        browser.open(f"{page}?visitor=new")
        # The HTML starts with the light scheme; the theme's script switches to the one the
        # visitor's system prefers.
        assert browser.wait_for(
            "document.body.getAttribute('data-md-color-scheme') === 'slate'", timeout=60
        )
        # The theme fades the background between schemes: on a loaded machine a single read can
        # land mid-fade, so wait until the page settles on a dark background (or time out).
        channels = (
            "getComputedStyle(document.body).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number)"
        )
        red, green, blue = browser.wait_for(
            f"(c => c[0] + c[1] + c[2] < 200 ? c : null)({channels})"
        )
        assert red + green + blue < 200  # a dark background
        time.sleep(0.5)
        browser.screenshot(ARTIFACTS / "entry-dark.png", full_page=False)
    finally:
        browser.call("Emulation.setEmulatedMedia", features=[])
