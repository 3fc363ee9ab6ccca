"""The site's navigation: mkdocs.yml's nav with the Failures section generated."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from trainwreck.model import Entry
from trainwreck.site.indexes import categories

# Hand-written pages other people own; linked from the nav only when present.
OPTIONAL_PAGES = ("rule-language.md", "probe.md")


def entry_nav(entries: list[Entry]) -> list[Any]:
    """The 'Failures' section: the index pages, then each category's entries."""
    section: list[Any] = [
        {"All failures": "entries/index.md"},
        {"By severity": "by-severity.md"},
        {"Tags": "tags/index.md"},
        {"Detection rules": "rules.md"},
    ]
    by_title = sorted(entries, key=lambda e: e.title.lower())
    for category, members in categories(by_title).items():
        section.append(
            {
                html.escape(category.capitalize(), quote=False): [
                    # mkdocs-material prints nav titles as HTML: escape them.
                    {html.escape(e.title, quote=False): f"entries/{e.id}/index.md"}
                    for e in members
                ]
            }
        )
    return section


def _nav_file(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and len(item) == 1:
        value = next(iter(item.values()))
        return value if isinstance(value, str) else None
    return None


def compose_nav(
    base: list[Any] | None, failures: list[Any], docs_dir: Path, *, top: bool = True
) -> list[Any]:
    """mkdocs.yml's nav with its 'entries/index.md' item expanded into the Failures section,
    and hand-written pages that are not there (yet) left out."""
    nav: list[Any] = []
    placed = False
    for item in base or [{"Home": "index.md"}]:
        target = _nav_file(item)
        if target == "entries/index.md":
            title = next(iter(item)) if isinstance(item, dict) else "Failures"
            nav.append({title: failures})
            placed = True
            continue
        if (
            isinstance(item, dict)
            and len(item) == 1
            and isinstance(next(iter(item.values())), list)
        ):
            title, children = next(iter(item.items()))
            kept = compose_nav(children, failures, docs_dir, top=False) if children else []
            if kept:
                nav.append({title: kept})
            continue
        if target and "://" not in target:
            generated_stub = target in OPTIONAL_PAGES and not _has_real_page(docs_dir, target)
            if not (docs_dir / target).exists() or generated_stub:
                continue
        nav.append(item)
    if top and not placed and failures:
        nav.insert(min(1, len(nav)), {"Failures": failures})
    return nav


def _has_real_page(docs_dir: Path, name: str) -> bool:
    path = docs_dir / name
    return path.exists() and "This page has not been written yet." not in path.read_text(
        encoding="utf-8"
    )
