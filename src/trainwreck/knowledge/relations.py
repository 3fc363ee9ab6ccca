"""The relation vocabulary: how one entry's `related` list may name another, in one place.

schemas/entry.schema.json enumerates the same kinds (a test keeps the two equal). `check` asks
which relations must be declared back (`mutual`), the site labels links and shows reverse links
with `inverse`, and `diagnose` orders findings by the causal pair (a cause before its effect).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Relation:
    kind: str  # the word in `related[].relation`
    inverse: str  # the same relation seen from the other entry
    label: str  # how a page introduces the link ("Can cause")
    mutual: bool  # the other entry must declare `inverse` back (check reports it otherwise)
    causal: bool  # orders findings: the cause is named before its effect


RELATIONS: dict[str, Relation] = {
    relation.kind: relation
    for relation in (
        Relation("co-occurs", "co-occurs", "Often seen together with", True, False),
        Relation("confused-with", "confused-with", "Easily confused with", True, False),
        Relation("causes", "caused-by", "Can cause", True, True),
        Relation("caused-by", "causes", "Can be caused by", True, True),
        Relation("see-also", "see-also", "See also", False, False),
    )
}
CAUSES = "causes"
CONFUSED_WITH = "confused-with"
# A reverse link whose relation is unknown (an unchecked entry) is shown as background.
FALLBACK = "see-also"

# relation -> the relation the other entry must declare back (only the mutual ones)
RECIPROCAL: dict[str, str] = {kind: r.inverse for kind, r in RELATIONS.items() if r.mutual}
# relation -> the relation as seen from the other side (every kind)
INVERSE: dict[str, str] = {kind: r.inverse for kind, r in RELATIONS.items()}
# relation -> its label on a page
LABELS: dict[str, str] = {kind: r.label for kind, r in RELATIONS.items()}


def inverse_of(kind: object) -> str:
    """The relation as the other entry sees it; FALLBACK for a word outside the vocabulary."""
    return INVERSE.get(str(kind), FALLBACK)


def _related(entries: Mapping[str, Mapping[str, Any]], entry_id: str) -> Iterable[Any]:
    related = entries.get(entry_id, {}).get("related")
    return related if isinstance(related, list) else []


def causes(entries: Mapping[str, Mapping[str, Any]], a: str, b: str) -> bool:
    """Entry a causes entry b, by either side's `related` (a says `causes` b, or b says
    `caused-by` a). `entries` maps ids to anything with a `related` list: entry data or the
    bundle's entry summaries."""
    if any(
        isinstance(rel, Mapping) and rel.get("id") == b and rel.get("relation") == CAUSES
        for rel in _related(entries, a)
    ):
        return True
    back = RELATIONS[CAUSES].inverse
    return any(
        isinstance(rel, Mapping) and rel.get("id") == a and rel.get("relation") == back
        for rel in _related(entries, b)
    )


def declared(entries: Mapping[str, Mapping[str, Any]], a: str, b: str) -> str | None:
    """The first relation entry a declares to entry b, or None."""
    for rel in _related(entries, a):
        if isinstance(rel, Mapping) and rel.get("id") == b:
            return str(rel.get("relation"))
    return None
