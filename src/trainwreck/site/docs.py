"""Assembling the docs dir mkdocs builds: a copy of docs/ plus every generated page."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck.model import Entry
from trainwreck.reproduce.records import manifest_records
from trainwreck.site.entry import render_entry
from trainwreck.site.errors import BuildError
from trainwreck.site.indexes import render_indexes
from trainwreck.site.nav import OPTIONAL_PAGES, entry_nav
from trainwreck.site.related import RelatedLink, related_links
from trainwreck.site.rule_pages import Rule
from trainwreck.site.status import (
    PageStatus,
    ReproductionStatus,
    entry_status,
    reproduction_statuses,
)
from trainwreck.site.tags import entry_tags, paged_tags
from trainwreck.site.text import PAGE_LINKS, SLUG_RE, PageLinks, drop_page_links
from trainwreck.site.triage import render_triage
from trainwreck.vocabulary import Facet, load_vocabulary

# Generated paths inside the docs dir; an entry id must not collide with them.
RESERVED_IDS = {"index"}


@dataclass
class Pages:
    entries: int = 0
    indexes: int = 0
    figures: int = 0
    statuses: dict[str, PageStatus] = field(default_factory=dict)
    nav: list[Any] = field(default_factory=list)
    html_pages: int = 0


def generate_docs(
    root: Path,
    docs_out: Path,
    entries: list[Entry],
    manifest: dict[str, Any] | None,
    rules: list[Rule],
) -> Pages:
    """Copy docs/ into `docs_out` and write every generated page there."""
    _check_ids(entries)
    _copy_docs(root, docs_out)
    records = manifest_records(manifest)
    pages = Pages()
    context = _Context(
        root=root,
        docs_out=docs_out,
        links=related_links(entries),
        tag_pages=paged_tags(entries),
        vocabulary=load_vocabulary(root),
        titles={e.id: e.title for e in entries},
    )
    context.site_pages = _site_pages(docs_out, entries, context.tag_pages)
    broken: list[str] = []
    for entry in entries:
        parts = reproduction_statuses(root, entry, records)
        status = entry_status(parts)
        pages.statuses[entry.id] = status
        pages.figures += _write_entry_page(
            context, entry, status, _entry_rules(entry, rules), broken, parts
        )
        pages.entries += 1
    if broken:
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        raise BuildError(f"{broken[0]}{more}")
    pages.indexes += _write_indexes(context, entries, pages.statuses, rules)
    pages.nav = entry_nav(entries)
    return pages


@dataclass
class _Context:
    """What every generated page of one build reads."""

    root: Path
    docs_out: Path
    links: dict[str, list[RelatedLink]]
    tag_pages: set[str]
    vocabulary: dict[str, Facet]
    titles: dict[str, str]
    site_pages: set[str] = field(default_factory=set)


def _check_ids(entries: list[Entry]) -> None:
    for entry in entries:
        if entry.id in RESERVED_IDS:
            raise BuildError(
                f"entries/{entry.id}.yaml: the id '{entry.id}' is reserved by the site"
            )
        if not SLUG_RE.fullmatch(entry.id):
            raise BuildError(f"entries/{entry.id}.yaml: an entry id must be kebab-case")


def _copy_docs(root: Path, docs_out: Path) -> None:
    if docs_out.exists():
        shutil.rmtree(docs_out)
    source_docs = root / "docs"
    if source_docs.is_dir():
        shutil.copytree(source_docs, docs_out)
    else:
        docs_out.mkdir(parents=True)
    _exclude_ledgers_from_search(docs_out)
    for name in OPTIONAL_PAGES:
        # Hand-written pages that link here must not break the strict build while the page is
        # being written; the stub says so plainly and stays out of the nav.
        if not (docs_out / name).exists():
            title = name.removesuffix(".md").replace("-", " ").capitalize()
            (docs_out / name).write_text(
                f"# {title}\n\nThis page has not been written yet.\n", encoding="utf-8"
            )


# Material's search skips a page whose front matter says `search: {exclude: true}`.
SEARCH_EXCLUDED = "---\nsearch:\n  exclude: true\n---\n"


def _exclude_ledgers_from_search(docs_out: Path) -> None:
    """Audit ledgers quote every message they check: a pasted error line must land on its entry,
    not on the ledger that verified it, so the copies the site builds from leave search."""
    for ledger in sorted((docs_out / "audits").glob("*.md")):
        text = ledger.read_text(encoding="utf-8")
        if not text.startswith("---\n"):
            ledger.write_text(SEARCH_EXCLUDED + text, encoding="utf-8")


def _site_pages(docs_out: Path, entries: list[Entry], tag_pages: set[str]) -> set[str]:
    """Every page the site will have, as paths in the docs dir (what a relative link may name)."""
    site_pages = {p.relative_to(docs_out).as_posix() for p in docs_out.rglob("*.md")}
    site_pages |= {f"entries/{e.id}/index.md" for e in entries}
    site_pages |= {"entries/index.md", "by-severity.md", "tags/index.md", "rules.md"}
    site_pages |= {f"tags/{tag}.md" for e in entries for tag in entry_tags(e) if tag in tag_pages}
    return site_pages


def _entry_rules(entry: Entry, rules: list[Rule]) -> list[Rule]:
    """The rules shown on an entry's page: those that diagnose it, then others its fingerprint
    names."""
    named = (entry.data.get("fingerprint") or {}).get("rules") or []
    mine = [r for r in rules if str(r.data.get("entry")) == entry.id]
    return [*mine, *[r for r in rules if r.id in named and r not in mine]]


def _write_entry_page(
    context: _Context,
    entry: Entry,
    status: PageStatus,
    rules: list[Rule],
    broken: list[str],
    parts: list[ReproductionStatus] | None = None,
) -> int:
    """Write the entry's page and its figures; returns the figure count. Relative links in its
    text that name no page are added to `broken`."""
    page_dir = context.docs_out / "entries" / entry.id
    page_dir.mkdir(parents=True, exist_ok=True)
    token = PAGE_LINKS.set(
        PageLinks(
            f"entries/{entry.id}/index.md", f"entries/{entry.id}.yaml", context.site_pages, broken
        )
    )
    try:
        text, figures = render_entry(
            context.root,
            entry,
            status=status,
            rules=rules,
            related=context.links[entry.id],
            titles=context.titles,
            page_dir=page_dir,
            tag_pages=context.tag_pages,
            vocabulary=context.vocabulary,
            parts=parts,
        )
    finally:
        PAGE_LINKS.reset(token)
    (page_dir / "index.md").write_text(text, encoding="utf-8")
    return figures


def _write_indexes(
    context: _Context, entries: list[Entry], statuses: dict[str, PageStatus], rules: list[Rule]
) -> int:
    """Write the list pages and the triage page; returns how many."""
    # Index rows quote each entry's first sentence away from its page, where its relative links
    # would point elsewhere: they are dropped there (their text stays).
    token = PAGE_LINKS.set(drop_page_links)
    try:
        indexes = render_indexes(entries, statuses, rules)
        indexes["triage.md"] = render_triage(entries, context.vocabulary, context.links)
    finally:
        PAGE_LINKS.reset(token)
    for path, text in indexes.items():
        target = context.docs_out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return len(indexes)
