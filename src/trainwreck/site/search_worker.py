"""Repairs lunr's token-set keys in mkdocs-material's search worker after each site build.

lunr 2.3.9 (bundled in the theme's `assets/javascripts/workers/search.*.min.js`, and the last
lunr release) builds its word automaton by merging equal nodes, keyed by
`TokenSet.prototype.toString`: the final flag, then each edge's one-character label followed by the
target node's numeric id, with nothing between them. When labels are digits, two different nodes
can write the same key (an edge "1" to node 23 and an edge "4" to node 5 spell "012345", as do an
edge "1" to node 2 and an edge "3" to node 45), so lunr merges them: the automaton then holds
words that are in no page and loses words that are. Our pages are full of version numbers, and on
2026-12-03 the built index held the phantom words "1.0.10" and "5.0.10": any search term starting
with "1" (the NumPy "1.x" line, torchrun's "local_rank: 1") expanded to "1.0.10", lunr read its
missing posting, threw, and the worker answered no results at all (lunr.js issue 503 reports
words missing from a loaded index).

Ending each edge's part of the key with a comma makes the key unambiguous (the label is always the
one character after the flag or a comma, the id runs to the next comma), so only equal nodes merge.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainwreck.site.errors import BuildError

# lunr's minified toString: `e=e+s+o.id}return e}` in the theme's 9.x builds; names may differ.
_TO_STRING = re.compile(
    r"(TokenSet\.prototype\.toString=function\(\)\{if\(this\._str\)return this\._str;"
    r"for\(var (\w+)=this\.final\?\"1\":\"0\",[^{}]*\{var (\w+)=\w+\[\w+\],(\w+)=this\.edges\[\3\];)"
    r"\2=\2\+\3\+\4\.id\}"
)
_REPAIRED = re.compile(
    r"TokenSet\.prototype\.toString=function\(\)\{[^}]*\w+=\w+\+\w+\+\w+\.id\+\",\"\}"
)


def repair_source(source: str, name: str) -> str:
    """The worker's source with lunr's node keys made unambiguous (unchanged if already done)."""
    if _REPAIRED.search(source):
        return source
    repaired, count = _TO_STRING.subn(r'\1\2=\2+\3+\4.id+","}', source)
    if count != 1:
        raise BuildError(
            f"{name}: lunr's TokenSet.prototype.toString is not in the form Trainwreck repairs "
            f"(found {count}); without the repair, searches for numbers can find nothing "
            "(see trainwreck/site/search_worker.py): use mkdocs-material 9.x"
        )
    return repaired


def repair_search_worker(site_dir: Path) -> list[Path]:
    """Repairs every search worker the theme wrote into `site_dir` (none without the search
    plugin); returns the workers found."""
    workers = sorted((site_dir / "assets" / "javascripts" / "workers").glob("search.*.min.js"))
    for worker in workers:
        source = worker.read_text(encoding="utf-8")
        repaired = repair_source(source, str(worker))
        if repaired != source:
            worker.write_text(repaired, encoding="utf-8")
    return workers
