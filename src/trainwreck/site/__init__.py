"""`trainwreck build` and `trainwreck serve`: publish the encyclopedia as a static site.

The build chains the stages: check (entries valid) -> reproduce (notebooks, cached) -> compile
(rules) -> pages -> `mkdocs build --strict` into site/. Pages are assembled in build/docs/: a
copy of the hand-written docs/ plus the generated pages (one per entry with its executed
reproduction and figures, index pages, tag pages, the rules page), so nothing generated lands
in the source tree.

The status shown for a reproduction comes from build/manifest.json and is checked against the
current notebook source: a page never claims a run that did not happen for the source it shows.

The modules, each one job (dependencies point down this list, never up):

    command       the command line: build, serve
    pipeline      build(): the stages in order, the summary
    skipping      skipping stages whose inputs did not change (trainwreck.stamps)
    mkdocs_build  mkdocs build --strict
    nav           the navigation, with the generated Failures section
    docs          the docs dir: docs/ copied, every generated page written
    indexes       all failures, by severity, tags, detection rules
    triage        'What are you seeing?'
    entry         an entry page, one function per section
    reproduction  its Reproduction section
    messages      its 'Messages this failure prints'
    related       related failures, both directions
    tags          tags and facets
    rule_pages    a rule as a page section
    notebook      a notebook as Markdown, with outputs and figures
    status        the honest reproduction status and the fact check's badge
    text          escaping and sanitising contributed text
    errors        BuildError

mkdocs, nbformat and the jupyter stack are imported only where used, so `import trainwreck.site`
stays cheap and a missing extra is one clear line, not a traceback.
"""

from __future__ import annotations

from trainwreck.reproduce.records import manifest_records
from trainwreck.site.command import (
    configure_build_parser,
    configure_serve_parser,
    make_server,
    run_build,
    run_serve,
)
from trainwreck.site.docs import Pages, generate_docs
from trainwreck.site.errors import BuildError
from trainwreck.site.indexes import render_indexes
from trainwreck.site.mkdocs_build import run_mkdocs
from trainwreck.site.nav import compose_nav
from trainwreck.site.notebook import RenderedNotebook, render_notebook
from trainwreck.site.pipeline import Summary, build
from trainwreck.site.related import RelatedLink, related_links
from trainwreck.site.rule_pages import Rule, load_rules, render_rule
from trainwreck.site.status import (
    PageStatus,
    ReviewStatus,
    current_hashes,
    review_status_for,
    status_for,
)
from trainwreck.site.triage import render_triage

# review.py reads the manifest through this name; the records are typed now (RunRecord).
_manifest_records = manifest_records

__all__ = [
    "BuildError",
    "PageStatus",
    "Pages",
    "RelatedLink",
    "RenderedNotebook",
    "ReviewStatus",
    "Rule",
    "Summary",
    "build",
    "compose_nav",
    "configure_build_parser",
    "configure_serve_parser",
    "current_hashes",
    "generate_docs",
    "load_rules",
    "make_server",
    "related_links",
    "render_indexes",
    "render_notebook",
    "render_rule",
    "render_triage",
    "review_status_for",
    "run_build",
    "run_mkdocs",
    "run_serve",
    "status_for",
]
