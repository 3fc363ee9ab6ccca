"""Related failures: the links an entry names and the ones that name it."""

from __future__ import annotations

from dataclasses import dataclass

from trainwreck.model import Entry

RELATION_LABELS = {
    "co-occurs": "Often seen together with",
    "confused-with": "Easily confused with",
    "causes": "Can cause",
    "caused-by": "Can be caused by",
    "see-also": "See also",
}
# The relation as seen from the other side, for reverse links.
INVERSE_RELATION = {
    "co-occurs": "co-occurs",
    "confused-with": "confused-with",
    "causes": "caused-by",
    "caused-by": "causes",
    "see-also": "see-also",
}


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
            relation = INVERSE_RELATION.get(str(item.get("relation")), "see-also")
            links[other].append(RelatedLink(entry.id, relation, item.get("note"), True))
            seen.add((other, entry.id))
    return links
