"""The controlled vocabulary entries are classified by: facets, their values and what they mean.

Every value is defined once, with a label and a description, under `$defs` of
schemas/entry.schema.json (a `oneOf` of documented `const`s per facet). `trainwreck check`
enforces it through the schema; the site reads it from here for labels, descriptions and order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.model import load_schema, schema_dir

# The facets in the order a reader narrows by them: what they see, where, with what, how big.
FACETS = ("symptom", "component", "framework", "scale")
# The framework value that means "plain PyTorch hits it too", so it matches every framework.
ANY_FRAMEWORK = "any"


@dataclass(frozen=True)
class Term:
    value: str
    label: str
    description: str


@dataclass(frozen=True)
class Facet:
    name: str
    label: str
    description: str
    terms: tuple[Term, ...]

    def term(self, value: str) -> Term:
        for term in self.terms:
            if term.value == value:
                return term
        return Term(value, value, "")

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(term.value for term in self.terms)


def load_vocabulary(root: Path | None = None) -> dict[str, Facet]:
    """The facets defined in the entry schema, by name, in FACETS order."""
    schema = load_schema("entry.schema.json", str(schema_dir(root)))
    definitions: dict[str, Any] = schema.get("$defs", {})
    vocabulary: dict[str, Facet] = {}
    for name in FACETS:
        spec = definitions.get(name) or {}
        terms = tuple(
            Term(str(o["const"]), str(o.get("title", o["const"])), str(o.get("description", "")))
            for o in spec.get("oneOf", [])
            if isinstance(o, dict) and "const" in o
        )
        vocabulary[name] = Facet(
            name, str(spec.get("title", name)), str(spec.get("description", "")), terms
        )
    return vocabulary


def entry_facets(
    data: dict[str, Any], vocabulary: dict[str, Facet] | None = None
) -> dict[str, list[str]]:
    """An entry's facet values, empty where missing. With `vocabulary`, only the values it knows:
    `check` rejects the others, but a page may be built from an unchecked entry and must never
    print an unknown value as a label or put it in a link."""
    facets = data.get("facets")
    facets = facets if isinstance(facets, dict) else {}
    values = {
        name: [str(v) for v in facets.get(name) or [] if isinstance(v, str)] for name in FACETS
    }
    if vocabulary is not None:
        values = {
            name: [v for v in found if name in vocabulary and v in vocabulary[name].values]
            for name, found in values.items()
        }
    return values
