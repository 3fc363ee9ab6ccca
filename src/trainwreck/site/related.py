"""Related failures: the links an entry names and the ones that name it."""

from __future__ import annotations

from dataclasses import dataclass

from trainwreck.knowledge.relations import LABELS, inverse_of
from trainwreck.model import Entry

# The relation vocabulary lives in the knowledge base; the page labels links with it and names
# reverse links by the inverse relation.
RELATION_LABELS = LABELS


@dataclass
class RelatedLink:
    id: str
    relation: str
    note: str | None
    reverse: bool  # only the other entry names this relation


def related_links(entries: list[Entry]) -> dict[str, list[RelatedLink]]:
    """Each entry's related entries, both the ones it names and the ones that name it."""
    known = {e.id for e in entries}
    links: dict[str, list[RelatedLink]] = {e.id: [] for e in entries}
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        for item in entry.related:
            if not isinstance(item, dict) or item.get("id") not in known:
                continue
            links[entry.id].append(
                RelatedLink(item["id"], str(item.get("relation")), item.get("note"), False)
            )
            seen.add((entry.id, item["id"]))
    for entry in entries:
        for item in entry.related:
            if not isinstance(item, dict) or item.get("id") not in known:
                continue
            other = item["id"]
            if (other, entry.id) in seen or other == entry.id:
                continue
            relation = inverse_of(item.get("relation"))
            links[other].append(RelatedLink(entry.id, relation, item.get("note"), True))
            seen.add((other, entry.id))
    return links
