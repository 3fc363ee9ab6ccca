"""The hostile site in a browser: pages built from a repository whose every contributed field
carries script (tests/browser/payload_repo.py) are loaded in headless Chromium, and nothing runs.

Observers: the server logs every request (each payload would fetch /pwned/<field>-<vector>),
each payload would also set window.PWNED, and the DOM is searched for event-handler attributes
and script URLs. A control page with one live payload proves the observers see a script run.
Without Chromium the test is skipped, except in CI (CI=true), where it fails; the same property
is checked on the HTML text by tests/test_site_xss.py.
"""

from __future__ import annotations

import functools
import http.server
import time
from collections.abc import Iterator

import pytest

from tests.browser.cdp import Browser
from tests.browser.payload_repo import ENTRY_ID, MARK, build_payload_site
from tests.browser.serving import require_chromium, require_modules, serving

PAGES = [
    "",
    f"entries/{ENTRY_ID}/",
    "entries/demo-hardware/",
    "entries/demo-fragmentation/",
    "entries/",
    "by-severity/",
    "rules/",
    "tags/",
    "tags/straggler/",
]

# Elements carrying an on* attribute, script URLs (the theme's own "javascript:void(0)" share
# button aside), scripts mentioning the payload mark, and the global every payload sets.
DOM_PROBE = f"""
(() => {{
  const all = [...document.querySelectorAll('*')];
  const handlers = all.filter(el => [...el.attributes].some(a => a.name.toLowerCase().startsWith('on')))
    .map(el => el.outerHTML.slice(0, 120));
  const urls = all.flatMap(el => ['href', 'src', 'action', 'formaction', 'xlink:href']
      .map(name => el.getAttribute(name)).filter(Boolean)
      .map(value => value.replace(/[\\s\\u0000-\\u001f]/g, '').toLowerCase())
      .filter(value => (value.startsWith('javascript:') && value !== 'javascript:void(0)')
        || value.startsWith('vbscript:')
        || (value.startsWith('data:') && !(el.tagName === 'IMG' && value.startsWith('data:image/svg+xml;base64,')))));
  const scripts = [...document.scripts].filter(s => s.textContent.includes('{MARK}'))
    .map(s => s.textContent.slice(0, 120));
  const frames = document.querySelectorAll('iframe, object, embed').length;
  return {{handlers, urls, scripts, frames, pwned: window.PWNED === undefined ? null : String(window.PWNED)}};
}})()
"""
CLEAN = {"handlers": [], "urls": [], "scripts": [], "frames": 0, "pwned": None}


class _Recording(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    require_chromium()
    require_modules("mkdocs", "material", "nh3")
    site_dir = build_payload_site(tmp_path_factory.mktemp("xss-browser") / "repo")
    # The control: one page where a payload is live, to show the observers work.
    (site_dir / "control.html").write_text(
        f"<!doctype html><title>control</title><img src=x onerror=\"fetch('{MARK}control');"
        "window.PWNED='control'\">"
    )
    requests: list[str] = []
    handler = functools.partial(
        type("Handler", (_Recording,), {"requests": requests}), directory=str(site_dir)
    )
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        yield url, requests


@pytest.fixture(scope="module")
def browser(hostile: tuple[str, list[str]]) -> Iterator[Browser]:
    with Browser(require_chromium()) as chromium:
        yield chromium


def _settle(browser: Browser) -> None:
    """Let images fail, details toggle and fetches leave before looking."""
    browser.wait_for("document.readyState === 'complete'")
    time.sleep(1.0)


def test_the_observers_see_a_live_payload(browser: Browser, hostile: tuple[str, list[str]]) -> None:
    served, requests = hostile
    browser.open(f"{served}/control.html")
    assert browser.wait_for("window.PWNED === 'control'")
    deadline = time.monotonic() + 10
    while f"{MARK}control" not in requests and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"{MARK}control" in requests
    assert browser.evaluate(DOM_PROBE)["handlers"]  # the control's onerror is in the DOM


@pytest.mark.parametrize("page", PAGES)
def test_no_script_runs_on_the_hostile_site(
    browser: Browser, hostile: tuple[str, list[str]], page: str
) -> None:
    served, requests = hostile
    browser.open(f"{served}/{page}")
    _settle(browser)
    # Open every collapsed block and hover nothing: details' ontoggle would fire now.
    browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true), true")
    time.sleep(0.3)
    assert browser.evaluate(DOM_PROBE) == CLEAN
    assert [path for path in requests if path.startswith(MARK) and "control" not in path] == []
    # The contributed title is shown as the text it is.
    if page == f"entries/{ENTRY_ID}/":
        heading = browser.evaluate("document.querySelector('article h1').textContent")
        assert f"<script>fetch('{MARK}title')" in heading
        # The SVG output is shown as an image, and its script did not run.
        assert browser.evaluate(
            "[...document.images].some(i => i.src.startsWith('data:image/svg+xml') && i.complete)"
        )


def test_search_results_do_not_run_contributed_markup(
    browser: Browser, hostile: tuple[str, list[str]]
) -> None:
    served, requests = hostile
    browser.open(f"{served}/?q=demo")
    browser.wait_for("document.querySelectorAll('.md-search-result__item').length > 0", timeout=30)
    _settle(browser)
    assert browser.evaluate(DOM_PROBE) == CLEAN
    assert [path for path in requests if path.startswith(MARK) and "control" not in path] == []
