"""Generated list pages: all failures, by severity, tags, detection rules."""

from __future__ import annotations

from trainwreck.model import Entry
from trainwreck.site.rule_pages import Rule
from trainwreck.site.status import PageStatus
from trainwreck.site.tags import MIN_TAG_ENTRIES, entry_tags
from trainwreck.site.text import SLUG_RE, code_span, inline_md, plain, summary_line

CATEGORY_ORDER = ("reliability", "performance", "correctness", "infrastructure")
CATEGORY_TEXT = {
    "reliability": "the job crashes or hangs",
    "performance": "the job runs slower than it should",
    "correctness": "the job runs but learns the wrong thing",
    "infrastructure": "the platform under the job fails",
}
SEVERITY_ORDER = ("critical", "high", "medium", "low")


# Front matter of generated lists that only repeat entry titles and quick answers: kept out of
# the search index, so a pasted message lands on the entry, not on a short list that names it.
SEARCH_EXCLUDED = ("---", "search:", "  exclude: true", "---", "")


def _entry_row(entry: Entry, status: PageStatus, prefix: str) -> str:
    d = entry.data
    return (
        f"| [{plain(entry.title)}]({prefix}{entry.id}/index.md) | {plain(d.get('severity', ''))} "
        f"| {status.label} | {inline_md(summary_line(entry))} |"
    )


def _severity_key(entry: Entry) -> tuple[int, str]:
    severity = str(entry.data.get("severity", ""))
    rank = SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)
    return rank, entry.title.lower()


def categories(entries: list[Entry]) -> dict[str, list[Entry]]:
    """The entries by category, categories in reading order (the known ones first), entries in
    the order given."""
    by_category: dict[str, list[Entry]] = {}
    for entry in entries:
        by_category.setdefault(str(entry.data.get("category", "other")), []).append(entry)
    ordered = [c for c in CATEGORY_ORDER if c in by_category] + sorted(
        c for c in by_category if c not in CATEGORY_ORDER
    )
    return {category: by_category[category] for category in ordered}


def render_indexes(
    entries: list[Entry], statuses: dict[str, PageStatus], rules: list[Rule]
) -> dict[str, str]:
    """Generated pages other than entry pages, keyed by their path in the docs dir."""
    # Most severe first, then by title: the order a reader scanning for their failure wants.
    entries = sorted(entries, key=_severity_key)
    pages = {
        "entries/index.md": _all_failures(entries, statuses),
        "by-severity.md": _by_severity(entries, statuses),
    }
    pages.update(_tag_pages(entries, statuses))
    pages["rules.md"] = _rules_page(entries, rules)
    return pages


_TABLE_HEAD = ("| Failure | Severity | Reproduction | Quick answer |", "|---|---|---|---|")


def _all_failures(entries: list[Entry], statuses: dict[str, PageStatus]) -> str:
    by_category = categories(entries)
    counts = {kind: 0 for kind in ("reproduced", "recorded")}
    for status in statuses.values():
        if status.kind in counts:
            counts[status.kind] += 1
    lines = [
        "# All failures",
        "",
        f"{len(entries)} failure{'s' if len(entries) != 1 else ''} in "
        f"{len(by_category)} categor{'y' if len(by_category) == 1 else 'ies'}; "
        f"{counts['reproduced']} reproduced by a notebook in this build, "
        f"{counts['recorded']} recorded on a GPU. "
        "See also the lists [by severity](../by-severity.md) and [by tag](../tags/index.md).",
        "",
    ]
    for category, members in by_category.items():
        lines += [
            f"## {plain(category.capitalize())}",
            "",
            f"*{CATEGORY_TEXT.get(category, '')}*" if category in CATEGORY_TEXT else "",
            "",
            *_TABLE_HEAD,
        ]
        lines += [_entry_row(e, statuses[e.id], "") for e in members]
        lines.append("")
    return "\n".join(lines)


def _by_severity(entries: list[Entry], statuses: dict[str, PageStatus]) -> str:
    lines = [*SEARCH_EXCLUDED, "# Failures by severity", ""]
    for severity in SEVERITY_ORDER:
        group = [e for e in entries if e.data.get("severity") == severity]
        if not group:
            continue
        lines += [
            f"## {severity.capitalize()}",
            "",
            *_TABLE_HEAD,
            *[_entry_row(e, statuses[e.id], "entries/") for e in group],
            "",
        ]
    return "\n".join(lines)


def _tag_pages(entries: list[Entry], statuses: dict[str, PageStatus]) -> dict[str, str]:
    """A page per tag that enough entries share, then the index of those tags."""
    pages: dict[str, str] = {}
    tags: dict[str, list[Entry]] = {}
    for entry in entries:
        for tag in entry_tags(entry):
            tags.setdefault(tag, []).append(entry)
    lines = [
        "# Tags",
        "",
        f"Tags shared by at least {MIN_TAG_ENTRIES} failures. To narrow down by what you see, use "
        "[What are you seeing?](../triage.md).",
        "",
        "| Tag | Failures |",
        "|---|---|",
    ]
    for tag in sorted(tags):
        if len(tags[tag]) < MIN_TAG_ENTRIES:
            continue
        lines.append(f"| [{tag}]({tag}.md) | {len(tags[tag])} |")
        pages[f"tags/{tag}.md"] = "\n".join(
            [
                *SEARCH_EXCLUDED,
                f"# Tag: {tag}",
                "",
                *_TABLE_HEAD,
                *[_entry_row(e, statuses[e.id], "../entries/") for e in tags[tag]],
                "",
                "[All tags](index.md)",
                "",
            ]
        )
    pages["tags/index.md"] = "\n".join([*lines, ""])
    return pages


def _rules_page(entries: list[Entry], rules: list[Rule]) -> str:
    titles = {e.id: e.title for e in entries}
    lines = [
        "# Detection rules",
        "",
        f"{len(rules)} rule{'s' if len(rules) != 1 else ''} that `trainwreck diagnose` runs over "
        "training logs. Each names the failure it diagnoses; the rule language is documented in "
        "[the rule language reference](rule-language.md).",
        "",
        "| Rule | Diagnoses | Confidence | What it sees |",
        "|---|---|---|---|",
    ]
    for rule in rules:
        entry_id = str(rule.data.get("entry", ""))
        target = (
            f"[{plain(titles[entry_id])}](entries/{entry_id}/index.md)"
            if entry_id in titles
            else code_span(entry_id)
        )
        confidence = rule.data.get("confidence")
        confidence_text = f"{confidence:.2f}" if isinstance(confidence, (int, float)) else ""
        name = (
            f"[`{rule.id}`](entries/{entry_id}/index.md#rule-{rule.id})"
            if entry_id in titles and SLUG_RE.fullmatch(rule.id)
            else code_span(rule.id)
        )
        lines.append(
            f"| {name} | {target} | {confidence_text} | {plain(rule.data.get('title', ''))} |"
        )
    lines.append("")
    return "\n".join(lines)
