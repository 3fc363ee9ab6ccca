"""Tags and facets of an entry: which tags get a page, chips, the facet line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainwreck.model import Entry
from trainwreck.site.text import SLUG_RE, inline_md, plain
from trainwreck.vocabulary import FACETS, Facet, entry_facets

# A tag gets its own page only when this many entries share it: a page listing one entry helps
# nobody (the facets of the controlled vocabulary are the way in; tags are free words).
MIN_TAG_ENTRIES = 2


def paged_tags(entries: list[Entry]) -> set[str]:
    """The tags that get a page: those at least MIN_TAG_ENTRIES entries share."""
    counts: dict[str, int] = {}
    for entry in entries:
        for tag in set(map(str, entry.data.get("tags") or [])):
            counts[tag] = counts.get(tag, 0) + 1
    return {tag for tag, count in counts.items() if count >= MIN_TAG_ENTRIES}


def entry_tags(entry: Entry) -> list[str]:
    """The entry's tags that can name a page (kebab-case; `check` reports the others)."""
    return [str(t) for t in entry.data.get("tags") or [] if SLUG_RE.fullmatch(str(t))]


def tag_links(tags: Iterable[Any], paged: set[str] | None) -> str:
    """Tags as chips: a link where the tag has a page, plain text where it does not."""
    chips = []
    for tag in map(str, tags):
        if paged is None or tag in paged:
            chips.append(f"[#{tag}](../../tags/{tag}.md){{ .tw-tag }}")
        else:
            chips.append(f'<span class="tw-tag">#{plain(tag)}</span>')
    return " ".join(chips)


def facet_line(entry: Entry, vocabulary: dict[str, Facet]) -> str:
    """'Symptom: Hang · Component: NCCL ...', each value linked to its place on the triage page."""
    parts = []
    facets = entry_facets(entry.data, vocabulary)
    for name in FACETS:
        values = facets[name]
        if not values:
            continue
        facet = vocabulary[name]
        shown = []
        for value in values:
            label = inline_md(facet.term(value).label)
            if name == "symptom":
                shown.append(f"[{label}](../../triage.md#symptom-{value})")
            else:
                shown.append(label)
        parts.append(f"**{facet.label}:** {', '.join(shown)}")
    return " · ".join(parts)
