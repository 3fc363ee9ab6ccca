"""Shared pytest fixtures. Keep this file small and generic: several test modules use it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session", autouse=True)
def caches_outside_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The toolkit's stamps and rules cache go to a temporary folder, for every test and every
    command a test runs (the variable is inherited): no test writes into the checkout's build/.
    A test of the default location unsets it for itself (monkeypatch.delenv)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # one cache for all workers of a run: a notebook or a name lookup is done once (the
        # reproduce cache and the manifest take locks), not once per worker
        base = base.parent
    cache = base / "trainwreck-cache"
    cache.mkdir(exist_ok=True)
    os.environ["TRAINWRECK_CACHE_DIR"] = str(cache)


@pytest.fixture(scope="session")
def reproduced_manifest() -> dict[str, Any]:
    """build/manifest.json after running every notebook this host can run, at ci scale, two at a
    time, through the content cache (unchanged notebooks are not executed again).

    Tests that check a notebook's evidence (logs, metrics, rules over broken/ and fixed/) use
    this, so each session executes each notebook at most once. Set TRAINWRECK_TEST_PROGRESS=1
    to see progress lines (pytest -s).
    """
    pytest.importorskip("nbclient", reason="the repro extra is not installed")
    from trainwreck.reproduce import reproduce

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    verbose = os.environ.get("TRAINWRECK_TEST_PROGRESS") == "1"
    return reproduce(REPO, jobs=2, scale="ci", progress=progress if verbose else None)
