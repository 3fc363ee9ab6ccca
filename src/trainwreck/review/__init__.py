"""`trainwreck review [--base REF]`: what a change does to the knowledge base, as Markdown.

    trainwreck review [--base REF] [--out FILE]

Compares the knowledge base at git REF (default `main`; in a pull request, the base commit) with
the working tree, and writes a summary for a pull-request comment:

- entries added, changed and removed, with their `trainwreck check` result;
- rules added, changed and removed, with their regression verdict (`trainwreck compile`'s test
  of each rule alone on its `tests.match` and `tests.clean` logs);
- the diagnosis delta: every regression log any rule lists and every recorded evidence folder
  (recordings/<id>/broken, fixed) diagnosed with the whole pack on each side, reporting the logs
  whose first finding changed and the findings gained or lost;
- notebooks added and changed: whether their code changed or only their prose, and their run
  status for the current source (from build/manifest.json, as the site reports it);
- the site pages the change affects.

A verdict breaks (exit 1) when the change introduces a check error, a rule that fails
validation or its regression logs (and did not on the base), a `tests.match` log whose entry
was its first finding on the base and no longer is, a `tests.clean` log that gains the finding
it must not have, a recording whose broken/ run stops being diagnosed as its entry or whose
fixed/ run stops being clean, or a notebook whose run of the current source failed. Exit 0
otherwise, 2 on usage errors (not a git checkout, unknown REF).

The base is read from `git archive REF` unpacked into a temporary folder: the working tree,
its index and its worktrees are never touched.
"""

from __future__ import annotations

from trainwreck.review.base import ReviewError, base_tree, resolve_ref
from trainwreck.review.command import configure_parser, run
from trainwreck.review.compare import _expectations, review_change
from trainwreck.review.markdown import MARKER, render_markdown
from trainwreck.review.model import Review

__all__ = [
    "MARKER",
    "Review",
    "ReviewError",
    "_expectations",
    "base_tree",
    "configure_parser",
    "render_markdown",
    "resolve_ref",
    "review_change",
    "run",
]
