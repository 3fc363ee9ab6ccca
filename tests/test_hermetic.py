"""The suite leaves the checkout alone: the toolkit's caches go where TRAINWRECK_CACHE_DIR says."""

from __future__ import annotations

import os
from pathlib import Path

from trainwreck import stamps
from trainwreck.diagnose import diagnose

REPO = Path(__file__).resolve().parents[1]


def test_the_suite_keeps_caches_out_of_the_checkout():
    base = os.environ.get(stamps.CACHE_DIR_VARIABLE)
    assert base, "tests/conftest.py sets TRAINWRECK_CACHE_DIR for the whole session"
    assert not Path(base).resolve().is_relative_to(REPO)
    assert stamps.cache_dir(REPO).parent == Path(base)
    assert stamps.stamp_path(REPO, "compile").is_relative_to(base)


def test_diagnosing_in_the_checkout_writes_its_rules_cache_outside(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("step 1\n")
    cache = REPO / "build" / "rules-cache"
    before = sorted(cache.glob("*.json")) if cache.is_dir() else []
    diagnose([str(log)], REPO, use_installed=False)
    after = sorted(cache.glob("*.json")) if cache.is_dir() else []
    assert after == before
    assert list((stamps.cache_dir(REPO) / "rules-cache").glob("*.json"))


def test_without_the_variable_the_cache_is_the_checkouts_build(monkeypatch, tmp_path):
    monkeypatch.delenv(stamps.CACHE_DIR_VARIABLE)
    assert stamps.cache_dir(tmp_path) == tmp_path / "build"
    assert stamps.stamp_path(tmp_path, "site") == tmp_path / "build" / "stamps" / "site.json"
    monkeypatch.setenv(stamps.CACHE_DIR_VARIABLE, str(tmp_path / "c"))
    one, two = stamps.cache_dir(tmp_path / "one"), stamps.cache_dir(tmp_path / "two")
    assert one != two and one.parent == two.parent == tmp_path / "c"
