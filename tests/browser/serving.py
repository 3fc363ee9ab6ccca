"""What the browser tests share: finding Chromium, requiring the site's packages, and serving a
built site on 127.0.0.1 for the length of a test module."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.browser.cdp import find_chromium

IN_CI = os.environ.get("CI", "").lower() == "true"


def require_chromium() -> str:
    """Chromium's executable; outside CI the test is skipped without it, in CI it fails."""
    executable = find_chromium()
    if executable is None:
        reason = "headless Chromium is not installed (Debian: apt-get install -y chromium)"
        if IN_CI:
            pytest.fail(f"{reason}; CI must run the browser test")
        pytest.skip(reason)
    return executable


def require_modules(*names: str) -> None:
    """The packages a test needs: imported in CI (a missing one fails), else skipped without."""
    for name in names:
        if IN_CI:
            __import__(name)
        else:
            pytest.importorskip(name)


@contextmanager
def serving(server: http.server.HTTPServer) -> Iterator[str]:
    """Serve on a background thread; yields the base URL and shuts the server down after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
