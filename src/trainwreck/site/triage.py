"""'What are you seeing?': the triage page, from symptom to component to candidates."""

from __future__ import annotations

import json

from trainwreck.knowledge.relations import CONFUSED_WITH
from trainwreck.model import Entry
from trainwreck.site.related import RelatedLink
from trainwreck.site.text import inline_md, summary_line
from trainwreck.vocabulary import ANY_FRAMEWORK, FACETS, Facet, entry_facets


def _first_check(entry: Entry) -> str:
    """The first check of the entry's confirm section, with what confirms it."""
    items = [c for c in entry.data.get("confirm") or [] if isinstance(c, dict)]
    if not items:
        return ""
    first = items[0]
    text = inline_md(first.get("check", ""))
    if first.get("expect"):
        text += f" Expect: {inline_md(first['expect'])}"
    return text


def _candidate(
    entry: Entry,
    vocabulary: dict[str, Facet],
    links: list[RelatedLink],
    titles: dict[str, str],
) -> list[str]:
    """One candidate of the triage page: a list item with its facets in data attributes."""
    facets = entry_facets(entry.data, vocabulary)
    attributes = " ".join(
        f'data-{name}="{" ".join(facets[name])}"' for name in ("component", "framework", "scale")
    )
    marker = f'<span class="tw-candidate" {attributes}></span>'
    frameworks = [
        "any framework" if v == ANY_FRAMEWORK else vocabulary["framework"].term(v).label
        for v in facets["framework"]
    ]
    scales = [vocabulary["scale"].term(v).label for v in facets["scale"]]
    lines = [
        f"- {marker}**[{inline_md(entry.title)}](entries/{entry.id}/index.md)**: "
        f"{inline_md(summary_line(entry))}",
        "",
        f"    - *Framework:* {', '.join(frameworks)} · *Scale:* {', '.join(scales)}",
    ]
    first = _first_check(entry)
    if first:
        lines.append(f"    - *First check:* {first}")
    for link in links:
        if link.relation == CONFUSED_WITH and link.id in titles:
            note = f": {inline_md(link.note)}" if link.note else ""
            lines.append(
                f"    - *Not to be confused with* [{inline_md(titles[link.id])}]"
                f"(entries/{link.id}/index.md){note}"
            )
    return [*lines, ""]


def _filter_bar(vocabulary: dict[str, Facet]) -> str:
    """The empty, hidden filter bar; triage.js fills it with the options carried here, so the
    labels come from the vocabulary in the schema, not from the script."""
    import html

    attributes = []
    for name in FACETS:
        options = [
            [term.value, term.label]
            for term in vocabulary[name].terms
            if not (name == "framework" and term.value == ANY_FRAMEWORK)
        ]
        attributes.append(
            f'data-{name}-label="{html.escape(vocabulary[name].label)}" '
            f'data-{name}-options="{html.escape(json.dumps(options))}"'
        )
    return f'<div class="tw-triage-filters" hidden {" ".join(attributes)}></div>'


def render_triage(
    entries: list[Entry], vocabulary: dict[str, Facet], links: dict[str, list[RelatedLink]]
) -> str:
    """'What are you seeing?': symptom, then component; the candidates with their quick answer
    and the first check that tells them apart. Plain nested lists without JavaScript; with it,
    docs/javascripts/triage.js adds filters by component, framework and scale."""
    titles = {e.id: e.title for e in entries}
    ordered = sorted(entries, key=lambda e: e.title.lower())
    symptom_facet, component_facet = vocabulary["symptom"], vocabulary["component"]
    out = [
        "---",
        "title: What are you seeing?",
        "description: Start from what the failing run shows and narrow down to the failure.",
        "---",
        "",
        "# What are you seeing?",
        "",
        "Pick what the run shows, then the part of the stack it points at. Each candidate has its "
        "quick answer and the first check that tells it apart from the others. Have an error "
        "line? Paste it into the search box: every failure page lists the messages it prints.",
        "",
        _filter_bar(vocabulary),
        "",
    ]
    present = [
        term
        for term in symptom_facet.terms
        if any(term.value in entry_facets(e.data)["symptom"] for e in ordered)
    ]
    out += [
        f"- [{inline_md(term.label)}](#symptom-{term.value}): {inline_md(term.description)}"
        for term in present
    ]
    out.append("")
    for term in present:
        out += [
            f'<div class="tw-triage-symptom" data-symptom="{term.value}" markdown>',
            "",
            f"## {term.label} {{ #symptom-{term.value} }}",
            "",
            f"*{inline_md(term.description)}*",
            "",
        ]
        group = [e for e in ordered if term.value in entry_facets(e.data)["symptom"]]
        for component in component_facet.terms:
            members = [e for e in group if component.value in entry_facets(e.data)["component"]]
            if not members:
                continue
            out += [
                f'<div class="tw-triage-component" data-component="{component.value}" markdown>',
                "",
                f"### {term.label}: {component.label} {{ #{term.value}-{component.value} }}",
                "",
            ]
            for entry in members:
                out += _candidate(entry, vocabulary, links.get(entry.id, []), titles)
            out += ["</div>", ""]
        out += ["</div>", ""]
    return "\n".join(out)
