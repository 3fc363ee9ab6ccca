"""The page of one entry, one function per section."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.markup import url_problem
from trainwreck.model import Entry
from trainwreck.sanitize import escape_attribute
from trainwreck.site.messages import messages_section
from trainwreck.site.related import RELATION_LABELS, RelatedLink
from trainwreck.site.reproduction import render_reproduction
from trainwreck.site.rule_pages import Rule, render_rule
from trainwreck.site.status import (
    PageStatus,
    ReproductionStatus,
    ReviewStatus,
    review_status_for,
)
from trainwreck.site.tags import entry_tags, facet_line, tag_links
from trainwreck.site.text import (
    SLUG_RE,
    code_span,
    fenced,
    indented,
    inline_md,
    plain,
    prose,
    summary_line,
    yaml_string,
)
from trainwreck.vocabulary import Facet

FRAMEWORK_LABELS = {
    "pytorch": "PyTorch",
    "huggingface": "Hugging Face",
    "lightning": "Lightning",
    "deepspeed": "DeepSpeed",
    "megatron-lm": "Megatron-LM",
    "torchtitan": "torchtitan",
    "shell": "Shell",
    "other": "Other",
}


def _steps(steps: Iterable[Any]) -> str:
    out = []
    for number, step in enumerate(steps, 1):
        if isinstance(step, dict):
            out.append(f"{number}. {inline_md(step.get('do', ''))}")
            if step.get("code"):
                out += ["", fenced(str(step["code"]), str(step.get("language") or ""), "    "), ""]
        else:
            out.append(f"{number}. {inline_md(step)}")
    return "\n".join(out)


def _tier(label: str, tier: dict[str, Any]) -> str:
    lines = [f"### {label}: {inline_md(tier.get('title', ''))}", ""]
    if tier.get("when"):
        lines += [f"**When:** {inline_md(tier['when'])}", ""]
    lines += [_steps(tier.get("steps") or []), ""]
    if tier.get("cost"):
        lines += [f"**Cost:** {inline_md(tier['cost'])}", ""]
    return "\n".join(lines)


@dataclass
class EntryPage:
    """What an entry page is made of, besides the entry itself."""

    root: Path
    status: PageStatus
    rules: list[Rule]
    related: list[RelatedLink]
    titles: dict[str, str]
    page_dir: Path
    tag_pages: set[str] | None = None
    vocabulary: dict[str, Facet] | None = None
    figures: int = 0  # written next to the page by the reproduction section
    review: ReviewStatus | None = None  # the fact check's status, from the entry's checked block
    # Each reproduction with its own status (None: the entry's one, as `status` says).
    parts: list[ReproductionStatus] | None = None


def render_entry(
    root: Path,
    entry: Entry,
    *,
    status: PageStatus,
    rules: list[Rule],
    related: list[RelatedLink],
    titles: dict[str, str],
    page_dir: Path,
    tag_pages: set[str] | None = None,
    vocabulary: dict[str, Facet] | None = None,
    parts: list[ReproductionStatus] | None = None,
) -> tuple[str, int]:
    """The Markdown page of one entry (and its figures written into `page_dir`)."""
    page = EntryPage(root, status, rules, related, titles, page_dir, tag_pages, vocabulary)
    page.parts = parts
    page.review = review_status_for(entry)
    out: list[str] = []
    for section in SECTIONS:
        out += section(entry, page)
    return "\n".join(out), page.figures


Section = Callable[[Entry, EntryPage], list[str]]


def _header(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    out: list[str] = [
        "---",
        # The theme prints front-matter values into <title> and <meta> as they are: HTML-escaped.
        f"title: {yaml_string(html.escape(entry.title))}",
        f"description: {yaml_string(html.escape(summary_line(entry)))}",
        "---",
        "",
        f"# {plain(entry.title)}",
        "",
    ]
    category, severity = (escape_attribute(d.get(key, "")) for key in ("category", "severity"))
    review = _review(entry, page)
    # The status chip is the fact check's, never the entry's own `status` field: "reviewed" is
    # shown only while the checked block's digest matches the entry (site/status.py).
    chips = [
        f'<span class="tw-chip tw-category">{category}</span>',
        f'<span class="tw-chip tw-severity tw-severity-{severity}">severity: {severity}</span>',
        f'<span class="tw-chip tw-review tw-review-{review.kind}">{plain(review.label)}</span>',
        f'<span class="tw-chip tw-repro tw-repro-{page.status.kind}">{page.status.label}</span>',
    ]
    tags = tag_links(entry_tags(entry), page.tag_pages)
    out += [" ".join(chips), "", f"Tags: {tags}" if tags else "", ""]
    if page.vocabulary:
        out += [facet_line(entry, page.vocabulary), ""]
    if d.get("status") == "deprecated":
        out += [
            '!!! warning "Deprecated"',
            "",
            "    Kept for history: this failure no longer applies to current versions.",
            "",
        ]
    return out


def _quick_answer(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    # The admonition as the HTML mkdocs would make of it, so the sanitised block inside it stays
    # a block (indented under "!!!", it would be re-read as inline text).
    quick = d.get("quick_answer")
    opening = (
        f'<div class="tw-quick-answer">{prose(quick)}</div>'
        if isinstance(quick, str) and quick.strip()
        else ""
    )
    return [
        '<div class="admonition abstract">',
        '<p class="admonition-title">Quick answer</p>',
        opening,
        prose(d.get("summary", "")),
        "</div>",
        "",
        f"**Reproduction:** {inline_md(page.status.sentence)} ([details](#reproduction))",
        "",
        f"**Fact check:** {plain(_review(entry, page).sentence)} ([details](#fact-check))",
        "",
    ]


def _review(entry: Entry, page: EntryPage) -> ReviewStatus:
    if page.review is None:
        page.review = review_status_for(entry)
    return page.review


def ledger_link(root: Path, ledger: str) -> str | None:
    """The page link (from an entry page) to a ledger that docs/ publishes, or None: only
    `docs/audits/<slug>.md` that exists becomes a link, so contributed text names no other path."""
    folder, _, name = ledger.rpartition("/")
    stem = name.removesuffix(".md")
    if folder != "docs/audits" or not name.endswith(".md") or not SLUG_RE.fullmatch(stem):
        return None
    if not (root / "docs" / "audits" / name).is_file():
        return None
    return f"../../audits/{stem}.md"


def _fact_check(entry: Entry, page: EntryPage) -> list[str]:
    """Who checked the entry's facts, when, against what, what was left unverified, and the
    ledger; every value of the block is contributed text, shown escaped."""
    review = _review(entry, page)
    title = plain(review.label.replace('"', "'"))
    out = ["## Fact check", "", f'!!! {review.admonition} "{title}"', ""]
    out += [f"    {plain(review.sentence)}", ""]
    checked = review.checked
    if checked is None:
        out += [
            "    How an entry is checked, and what a check records: [Auditing an entry]"
            "(../../audits.md).",
            "",
        ]
        return out
    link = ledger_link(page.root, checked.ledger)
    if link is not None:
        out += [f"    Every claim, its verdict and its evidence: [the ledger]({link}).", ""]
    elif checked.ledger:
        out += [f"    Ledger: {code_span(checked.ledger)} (not published).", ""]
    if checked.against:
        out += ["**Checked against:**", "", *[f"- {plain(item)}" for item in checked.against], ""]
    if checked.not_verified:
        out += [
            "**Not verified:**",
            "",
            *[f"- {plain(item)}" for item in checked.not_verified],
            "",
        ]
    return out


def _messages(entry: Entry, page: EntryPage) -> list[str]:
    return messages_section(page.root, page.rules)


def _symptoms(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("symptoms"):
        return []
    out = ["## Symptoms", "", "| What you observe | Why it happens |", "|---|---|"]
    for symptom in d["symptoms"]:
        out.append(
            f"| {inline_md(symptom.get('observed', ''))} | {inline_md(symptom.get('why', ''))} |"
        )
    out.append("")
    return out


def _confirm(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("confirm"):
        return []
    out = ["## Confirm it", "", "Work through these checks before applying a fix:", ""]
    for item in d["confirm"]:
        out.append(f"- [ ] **{inline_md(item.get('check', ''))}**")
        if item.get("code"):
            out += ["", fenced(str(item["code"]), str(item.get("language") or ""), "    "), ""]
        out.append(f"    Expect: {inline_md(item.get('expect', ''))}")
        out.append("")
    return out


def _fix(entry: Entry, page: EntryPage) -> list[str]:
    fix = entry.data.get("fix") or {}
    if not fix:
        return []
    out = ["## Fix", ""]
    for key, label in (
        ("primary", "Primary fix"),
        ("fallback", "Fallback"),
        ("emergency", "Emergency mitigation"),
    ):
        if isinstance(fix.get(key), dict):
            out.append(_tier(label, fix[key]))
    if fix.get("verify"):
        out += ["### Verify the fix", "", _steps(fix["verify"]), ""]
    return out


def _code_examples(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("code_examples"):
        return []
    out = ["## Code examples", ""]
    for example in d["code_examples"]:
        label = FRAMEWORK_LABELS.get(str(example.get("framework")), str(example.get("framework")))
        if example.get("title"):
            label = f"{label}: {example['title']}"
        body = [
            fenced(str(example.get("code", "")), str(example.get("language") or "python")),
            "",
            f"**Why it works:** {inline_md(example.get('why', ''))}",
        ]
        out += [
            f'=== "{plain(label.replace(chr(34), chr(39)))}"',
            "",
            indented("\n".join(body)),
            "",
        ]
    return out


def _at_scale(entry: Entry, page: EntryPage) -> list[str]:
    scale = entry.data.get("scale") or {}
    if not scale:
        return []
    out = ["## At scale", ""]
    for key, label in (
        ("single_gpu", "One GPU or one process"),
        ("multi_gpu", "One node, several GPUs"),
        ("large_scale", "Hundreds or thousands of GPUs"),
    ):
        if scale.get(key):
            out += [f"**{label}.** {inline_md(scale[key])}", ""]
    return out


def _prevention(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("prevention"):
        return []
    return ["## Prevention", "", *[f"- {inline_md(p)}" for p in d["prevention"]], ""]


def _how_it_happens(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not (d.get("mechanism") or d.get("root_causes")):
        return []
    out = ["## How it happens", ""]
    if d.get("mechanism"):
        out += [prose(d["mechanism"]), ""]
    if d.get("root_causes"):
        out += ["**Root causes:**", "", *[f"- {inline_md(c)}" for c in d["root_causes"]], ""]
    return out


def _detection(entry: Entry, page: EntryPage) -> list[str]:
    fingerprint = entry.data.get("fingerprint") or {}
    out = ["## Detection", ""]
    if fingerprint.get("signal"):
        out += [f"**Fingerprint.** {inline_md(fingerprint['signal'])}", ""]
    if fingerprint.get("thresholds"):
        out += ["| Metric | Indicates this failure | Why this threshold |", "|---|---|---|"]
        for threshold in fingerprint["thresholds"]:
            out.append(
                f"| {inline_md(threshold.get('metric', ''))} "
                f"| {inline_md(threshold.get('value', ''))} "
                f"| {inline_md(threshold.get('note', ''))} |"
            )
        out.append("")
    out += [
        "Diagnose your own logs offline (nothing leaves your machine), from a clone of the "
        "repository ([how](../../diagnose.md)):",
        "",
        fenced(
            "pip install .                        # in the clone: the core, no PyTorch\n"
            "trainwreck diagnose path/to/logs/    # a file, a folder of per-rank logs, a glob\n"
            "trainwreck diagnose --format json run.log",
            "bash",
        ),
        "",
    ]
    rules = page.rules
    if not rules:
        return [*out, "No detection rule covers this failure yet.", ""]
    out += [
        "The rule below detects this failure in training logs."
        if len(rules) == 1
        else f"The {len(rules)} rules below detect this failure in training logs.",
        "",
    ]
    return out + [render_rule(rule) for rule in rules]


def _reproduction(entry: Entry, page: EntryPage) -> list[str]:
    text, page.figures = render_reproduction(
        page.root, entry, page.status, page.page_dir, page.parts
    )
    return [text, ""]


def _affected_systems(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("affected_systems"):
        return []
    return ["## Affected systems", "", *[f"- {inline_md(s)}" for s in d["affected_systems"]], ""]


def _faq(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("faq"):
        return []
    out = ["## FAQ", ""]
    for item in d["faq"]:
        out += [f"**{inline_md(item.get('q', ''))}**", "", prose(item.get("a", "")), ""]
    return out


def _references(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    if not d.get("references"):
        return []
    return ["## References", "", *[f"- {reference_link(ref)}" for ref in d["references"]], ""]


def _related(entry: Entry, page: EntryPage) -> list[str]:
    if not page.related:
        return []
    out = ["## Related failures", ""]
    for link in page.related:
        label = RELATION_LABELS.get(link.relation, link.relation)
        title = page.titles.get(link.id, link.id)
        line = f"- {label}: [{plain(title)}](../{link.id}/index.md)"
        if link.note:
            line += f": {inline_md(link.note)}"
        elif link.reverse:
            line += " (linked from that entry)"
        out.append(line)
    out.append("")
    return out


def _footer(entry: Entry, page: EntryPage) -> list[str]:
    d = entry.data
    return [
        "---",
        "",
        f"*Entry `{entry.id}` · created {plain(d.get('created', '?'))} · "
        f"updated {plain(d.get('updated', '?'))} · source `entries/{entry.id}.yaml`*",
        "",
    ]


# The page, top to bottom: a new section is one function added here.
SECTIONS: tuple[Section, ...] = (
    _header,
    _quick_answer,
    _messages,
    _symptoms,
    _confirm,
    _fix,
    _code_examples,
    _at_scale,
    _prevention,
    _how_it_happens,
    _detection,
    _fact_check,
    _reproduction,
    _affected_systems,
    _faq,
    _references,
    _related,
    _footer,
)


def reference_link(ref: Any) -> str:
    """A reference as an HTML link (never Markdown link syntax, which a ")" in the URL would
    end early); a URL that is not http(s) is shown as text, not linked."""
    if not isinstance(ref, dict):
        return plain(ref)
    url = str(ref.get("url") or "")
    title = plain(ref.get("title") or url)
    kind = f" ({plain(ref.get('kind'))})" if ref.get("kind") else ""
    if url_problem(url) is not None:
        return f"{title} ({code_span(url)}){kind}"
    return f'<a href="{escape_attribute(url)}">{title}</a>{kind}'
