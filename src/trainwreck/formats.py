"""The output formats of `trainwreck diagnose`, one renderer each, in the FORMATS table.

Every renderer reads the typed `Report` (findings.py) and nothing else; adding a format is one
function here and one row in FORMATS (the command's `--format` choices follow from it). Text
that came from a log or a file name is escaped before it reaches a terminal or a Markdown page.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainwreck.engine.reading import evidence_text
from trainwreck.findings import Report


def _pct(value: float) -> str:
    return f"{value:.2f}"


# A file name can hold any byte but / and NUL: shown on a terminal, ESC sequences, newlines or C1
# controls in it would be replayed or forge report lines. Escaped like log text.
_NAME_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))}


def shown_name(name: str) -> str:
    """A file name as printed in text and Markdown reports: control characters escaped."""
    return name.translate(_NAME_ESCAPES)


def format_text(report: Report) -> str:
    stats = report.stats
    lines: list[str] = []
    size = stats.bytes / 1e6
    head = (
        f"{len(report.findings)} finding(s) in {stats.files} file(s), "
        f"{stats.lines:,} lines, {size:.1f} MB, {stats.seconds:.2f} s, "
        f"{stats.rules} rules"
    )
    lines.append(head)
    if report.nothing_read:
        lines.append("No input could be read (see Skipped).")
    elif not report.findings:
        lines.append("No known failure found.")
    if report.suggestions:
        lines += [
            "",
            "Suggestions (not findings: no rule fired; closest entries to the error lines):",
        ]
        for item in report.suggestions:
            lines.append(f"  {item.entry}  similarity {_pct(item.score)}")
            lines.append(f"      {evidence_text(item.line.encode('utf-8', 'replace'))}")
    for finding in report.findings:
        lines.append("")
        lines.append(
            f"{finding.rank}. {finding.title}  [{finding.entry}]  confidence {_pct(finding.confidence)}"
        )
        lines.append(f"   seen: {finding.rule_title} (rules: {', '.join(finding.rules)})")
        ranks = ", ".join(str(r) for r in finding.ranks) or "unknown"
        initiating = finding.initiating_rank
        lines.append(
            f"   ranks: {ranks}; initiating rank: {initiating if initiating is not None else 'not determined'}"
        )
        for reason in finding.why:
            lines.append(f"   why: {reason}")
        for note in finding.notes:
            lines.append(f"   note: {note}")
        if finding.evidence:
            lines.append("   evidence:")
            for item in finding.evidence:
                lines.append(f"     {shown_name(item.file)}:{item.line}: {item.text}")
        if finding.root_cause:
            lines.append(f"   root cause: {finding.root_cause}")
        fix = finding.fix
        if fix.get("title"):
            lines.append(f"   fix: {fix['title']}")
            for number, step in enumerate(fix.get("steps", []), start=1):
                lines.append(f"     {number}. " + step.replace("\n", "\n        "))
        for step in finding.verify:
            lines.append("   verify: " + step.replace("\n", "\n        "))
        if finding.url:
            lines.append(f"   more: {finding.url}")
        for other in finding.competing:
            lines.append(f"   competing: {other.entry} ({_pct(other.confidence)}): {other.why}")
    if report.skipped:
        lines.append("")
        lines.append("Skipped:")
        for item in report.skipped:
            lines.append(f"  {shown_name(item.file)}: {item.reason}")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def format_markdown(report: Report) -> str:
    out: list[str] = ["# Trainwreck diagnosis", ""]
    stats = report.stats
    out.append(
        f"{len(report.findings)} finding(s) in {stats.files} file(s), {stats.lines:,} lines."
    )
    if report.nothing_read:
        out += ["", "No input could be read (see Skipped)."]
    elif not report.findings:
        out += ["", "No known failure found."]
    if report.suggestions:
        out += [
            "",
            "Suggestions (not findings: no rule fired; closest entries to the error lines):",
            "",
        ]
        for item in report.suggestions:
            out.append(f"- `{item.entry}` (similarity {_pct(item.score)}): {_md(item.line)}")
    for finding in report.findings:
        out += ["", f"## {finding.rank}. {finding.title}", ""]
        out.append(
            f"- **Entry:** [{finding.entry}]({finding.url})"
            if finding.url
            else f"- **Entry:** {finding.entry}"
        )
        out.append(f"- **Confidence:** {_pct(finding.confidence)} ({'; '.join(finding.why)})")
        out.append(f"- **Rules:** {', '.join(finding.rules)}")
        ranks = ", ".join(str(r) for r in finding.ranks) or "unknown"
        out.append(
            f"- **Ranks:** {ranks}; **initiating rank:** {finding.initiating_rank if finding.initiating_rank is not None else 'not determined'}"
        )
        if finding.root_cause:
            out.append(f"- **Root cause:** {finding.root_cause}")
        if finding.evidence:
            out += ["", "| file:line | text |", "|---|---|"]
            for item in finding.evidence:
                out.append(
                    f"| `{_md(shown_name(item.file))}:{item.line}` | `{_md(item.text[:200])}` |"
                )
        fix = finding.fix
        if fix.get("title"):
            out += ["", f"**Fix: {fix['title']}**", ""]
            out += [f"{n}. {_md(step)}" for n, step in enumerate(fix.get("steps", []), start=1)]
        if finding.verify:
            out += ["", "**Verify:**", ""] + [f"- {_md(step)}" for step in finding.verify]
        if finding.competing:
            out += ["", "**Competing hypotheses:**", ""]
            out += [f"- {o.entry} ({_pct(o.confidence)}): {o.why}" for o in finding.competing]
    if report.skipped:
        out += ["", "## Skipped", ""] + [
            f"- `{_md(shown_name(s.file))}`: {s.reason}" for s in report.skipped
        ]
    return "\n".join(out) + "\n"


def format_json(report: Report) -> str:
    """The report's JSON shape (docs/diagnose.md), for scripts."""
    return json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"


@dataclass(frozen=True)
class Format:
    """An output format of `trainwreck diagnose --format NAME`."""

    name: str
    render: Callable[[Report], str]
    help: str  # what it is for, as `diagnose --help` and docs/diagnose.md say


FORMATS: Mapping[str, Format] = MappingProxyType(
    {
        fmt.name: fmt
        for fmt in (
            Format("text", format_text, "for people (default)"),
            Format("json", format_json, "for scripts: a stable schema"),
            Format("markdown", format_markdown, "to paste into an issue or a postmortem"),
        )
    }
)


def render(report: Report, fmt: str) -> str:
    """The report in the format named `fmt` (a key of FORMATS)."""
    return FORMATS[fmt].render(report)
