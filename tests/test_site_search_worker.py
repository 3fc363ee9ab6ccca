"""The repair of lunr's token-set keys in the theme's search worker (site/search_worker.py).

The behaviour it restores (a search term starting with a digit finds pages) is checked in the
browser by tests/browser/test_search_messages.py::test_a_digit_alone_finds_pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainwreck.errors import BuildError
from trainwreck.site.search_worker import repair_search_worker, repair_source

material = pytest.importorskip("material")
WORKERS = Path(material.__file__).parent / "templates/assets/javascripts/workers"
# lunr 2.3.9's key of a token-set node, as minified in the theme: the flag, then label + id per edge
TO_STRING = re.compile(r"TokenSet\.prototype\.toString=function\(\)\{.*?return (\w+)\}")


def _installed_worker() -> Path:
    (worker,) = WORKERS.glob("search.*.min.js")
    return worker


def test_the_installed_theme_worker_is_repaired_once_and_only_there() -> None:
    source = _installed_worker().read_text(encoding="utf-8")
    repaired = repair_source(source, "worker.js")
    before, after = TO_STRING.search(source), TO_STRING.search(repaired)
    assert before and after
    assert ".id}" in before.group(0) and '.id+","}' in after.group(0)
    # nothing else changes: the text outside the function is identical
    assert source[: before.start()] == repaired[: after.start()]
    assert source[before.end() :] == repaired[after.end() :]
    assert repair_source(repaired, "worker.js") == repaired  # a second build repairs nothing


def test_a_worker_in_another_form_fails_the_build_naming_the_file() -> None:
    with pytest.raises(BuildError) as caught:
        repair_source("var lunr = {}; // some other search engine", "site/x/search.1.min.js")
    message = str(caught.value)
    assert message.startswith("site/x/search.1.min.js: lunr's TokenSet.prototype.toString")
    assert "\n" not in message


def test_the_site_dir_is_repaired_in_place(tmp_path: Path) -> None:
    workers = tmp_path / "site/assets/javascripts/workers"
    workers.mkdir(parents=True)
    copy = workers / _installed_worker().name
    copy.write_text(_installed_worker().read_text(encoding="utf-8"), encoding="utf-8")
    assert repair_search_worker(tmp_path / "site") == [copy]
    assert '.id+","}' in copy.read_text(encoding="utf-8")
    # a site built without the search plugin has no worker, and nothing to repair
    assert repair_search_worker(tmp_path / "elsewhere") == []
