"""The output formats of `trainwreck diagnose`, one renderer each, in the FORMATS table.

Every renderer reads the typed `Report` (findings.py) and nothing else; adding a format is one
function here and one row in FORMATS (the command's `--format` choices follow from it). Every
string from a log, a file name or a rule pack goes through sanitize.report_text before it reaches
a terminal or a Markdown page (docs/trust-model.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from trainwreck.findings import Finding, Report
from trainwreck.sanitize import report_text


def _pct(value: float) -> str:
    return f"{value:.2f}"


# Every string a report shows came from a log, a file name or a rule pack: each goes through
# sanitize.report_text, on one line (a multi-line fix step line by line).
def _t(value: Any) -> str:
    return report_text(value)


def _lines(value: Any, indent: str) -> str:
    """Multi-line text (a fix step with its code), each line escaped, continued at `indent`."""
    return ("\n" + indent).join(report_text(line) for line in str(value).split("\n"))


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
            lines.append(f"  {_t(item.entry)}  similarity {_pct(item.score)}")
            lines.append(f"      {_t(item.line)}")
    for finding in report.findings:
        lines.append("")
        lines.append(
            f"{finding.rank}. {_t(finding.title)}  [{_t(finding.entry)}]  "
            f"confidence {_pct(finding.confidence)}"
        )
        rules = _t(", ".join(finding.rules))
        lines.append(f"   seen: {_t(finding.rule_title)} (rules: {rules})")
        ranks = _t(", ".join(str(r) for r in finding.ranks) or "unknown")
        initiating = finding.initiating_rank
        initiating_text = _t(initiating) if initiating is not None else "not determined"
        lines.append(f"   ranks: {ranks}; initiating rank: {initiating_text}")
        for reason in finding.why:
            lines.append(f"   why: {_t(reason)}")
        for note in finding.notes:
            lines.append(f"   note: {_t(note)}")
        if finding.evidence:
            lines.append("   evidence:")
            for item in finding.evidence:
                lines.append(f"     {_t(item.file)}:{item.line}: {_t(item.text)}")
        if finding.root_cause:
            lines.append(f"   root cause: {_t(finding.root_cause)}")
        fix = finding.fix
        if fix.get("title"):
            lines.append(f"   fix: {_t(fix['title'])}")
            for number, step in enumerate(fix.get("steps", []), start=1):
                lines.append(f"     {number}. " + _lines(step, " " * 8))
        for step in finding.verify:
            lines.append("   verify: " + _lines(step, " " * 8))
        if finding.url:
            lines.append(f"   more: {_t(finding.url)}")
        for other in finding.competing:
            lines.append(
                f"   competing: {_t(other.entry)} ({_pct(other.confidence)}): {_t(other.why)}"
            )
    if report.skipped:
        lines.append("")
        lines.append("Skipped:")
        for item in report.skipped:
            lines.append(f"  {_t(item.file)}: {_t(item.reason)}")
    return "\n".join(lines) + "\n"


def _md(value: Any) -> str:
    """Prose in GitHub Markdown (titles, reasons, fix steps): shown as the same characters."""
    return report_text(value, "markdown")


def _code(value: Any, limit: int | None = None) -> str:
    """Log text, file names and ids in GitHub Markdown: an inline code span."""
    return report_text(value, "code", limit=limit)


def _md_lines(value: Any, indent: str) -> str:
    return ("\n" + indent).join(_md(line) for line in str(value).split("\n"))


# An entry's page address as a Markdown link target: a plain URL that cannot end the link early.
_LINKABLE = re.compile(r"(?:https?|file)://[A-Za-z0-9\-._~:/?#@!$&'*+,;=%]+")


def _entry_link(finding: Finding) -> str:
    """The entry, linked to its page when the address is a plain http(s) or file URL."""
    url = finding.url
    if url and _LINKABLE.fullmatch(url):
        return f"[{_md(finding.entry)}]({url})"
    return _code(finding.entry) + (f" ({_code(url)})" if url else "")


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
            out.append(
                f"- {_code(item.entry)} (similarity {_pct(item.score)}): {_code(item.line, 300)}"
            )
    for finding in report.findings:
        out += ["", f"## {finding.rank}. {_md(finding.title)}", ""]
        out.append(f"- **Entry:** {_entry_link(finding)}")
        out.append(
            f"- **Confidence:** {_pct(finding.confidence)} ({'; '.join(map(_md, finding.why))})"
        )
        out.append(f"- **Rules:** {', '.join(_code(rule) for rule in finding.rules)}")
        ranks = _md(", ".join(str(r) for r in finding.ranks) or "unknown")
        initiating = finding.initiating_rank
        initiating_text = _md(initiating) if initiating is not None else "not determined"
        out.append(f"- **Ranks:** {ranks}; **initiating rank:** {initiating_text}")
        if finding.root_cause:
            out.append(f"- **Root cause:** {_md(finding.root_cause)}")
        if finding.evidence:
            out += ["", "| file:line | text |", "|---|---|"]
            for item in finding.evidence:
                out.append(f"| {_code(f'{item.file}:{item.line}')} | {_code(item.text, 200)} |")
        fix = finding.fix
        if fix.get("title"):
            out += ["", f"**Fix: {_md(fix['title'])}**", ""]
            out += [
                f"{n}. {_md_lines(step, '   ')}"
                for n, step in enumerate(fix.get("steps", []), start=1)
            ]
        if finding.verify:
            out += ["", "**Verify:**", ""]
            out += [f"- {_md_lines(step, '  ')}" for step in finding.verify]
        if finding.competing:
            out += ["", "**Competing hypotheses:**", ""]
            out += [
                f"- {_code(o.entry)} ({_pct(o.confidence)}): {_md(o.why)}"
                for o in finding.competing
            ]
    if report.skipped:
        out += ["", "## Skipped", ""]
        out += [f"- {_code(s.file)}: {_md(s.reason)}" for s in report.skipped]
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
