"""The output formats of `trainwreck diagnose`, one renderer each, in the FORMATS table.

Every renderer reads the typed `Report` (findings.py) and nothing else; adding a format is one
function here and one row in FORMATS (the command's `--format` choices follow from it). Every
string from a log, a file name or a rule pack goes through sanitize.report_text before it reaches
a terminal or a Markdown page (docs/trust-model.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
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


# The first sentence of a step: what to do; the rest is its detail (shown with --verbose).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`\"'])")
SHORT_DETAIL = 240  # characters of a step's detail shown without --verbose
SHELLS = ("bash", "sh", "shell", "console")  # a confirm check's code shown after a prompt


def _first_sentence(text: str) -> str:
    head = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    return head if len(head) <= SHORT_DETAIL else head[: SHORT_DETAIL - 1] + "…"


def _actions(fix: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fix's steps as (code, what to do); a bundle from before `actions` gives its steps."""
    actions = fix.get("actions")
    if isinstance(actions, list):
        return [(str(a.get("code", "")), str(a.get("do", ""))) for a in actions]
    return [("", str(step)) for step in fix.get("steps", [])]


def _fix_head(fix: Mapping[str, Any]) -> str:
    when = str(fix.get("when") or "")
    return str(fix["title"]) + (f" (when: {when.rstrip('.')})" if when else "")


GROUP_RANKS = 16  # a finding on more ranks than this shows them as ranges, with their count


def rank_ranges(ranks: Sequence[Any]) -> str:
    """Ranks as ranges of consecutive numbers ("0-136, 138-4,095"), then any host labels."""
    numbers = sorted({r for r in ranks if isinstance(r, int) and not isinstance(r, bool)})
    spans: list[str] = []
    start = previous = None
    for number in [*numbers, None]:
        if start is not None and (number is None or number != previous + 1):
            spans.append(f"{start:,}" if start == previous else f"{start:,}-{previous:,}")
            start = None
        if start is None:
            start = number
        previous = number
    spans += [str(r) for r in ranks if not isinstance(r, int) or isinstance(r, bool)]
    return ", ".join(spans)


def _ranks(finding: Finding) -> str:
    """Ranks and the initiating one, said once; "" when the log names no rank. Past
    GROUP_RANKS ranks, their count and ranges (a large job's thousands of ranks)."""
    ranks = ", ".join(str(r) for r in finding.ranks)
    if len(finding.ranks) > GROUP_RANKS:
        ranks = f"{len(finding.ranks):,} ranks: {rank_ranges(finding.ranks)}"
    initiating = finding.initiating_rank
    if initiating is None:
        return ranks
    return f"{ranks}; initiating rank {initiating}" if ranks else f"initiating rank {initiating}"


def _numbers(finding: Finding) -> str:
    return ", ".join(f"{name} {value.shown()}" for name, value in finding.numbers.items())


def format_text(report: Report, verbose: bool = False) -> str:
    stats = report.stats
    lines: list[str] = []
    size = stats.bytes / 1e6
    head = (
        f"{len(report.findings)} finding(s) in {stats.files} file(s), "
        f"{stats.lines:,} lines, {size:.1f} MB, {stats.seconds:.2f} s, "
        f"{stats.rules} rules"
    )
    lines.append(head)
    lines += job_summary(report)
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
            why = f" (shared words: {', '.join(item.shared)})" if item.shared else ""
            lines.append(f"  {_t(item.entry)}  similarity {_pct(item.score)}{_t(why)}")
            lines.append(f"      {_t(item.line)}")
    for finding in report.findings:
        lines += ["", *_finding_text(finding, verbose)]
    if report.skipped:
        lines.append("")
        lines.append("Skipped:")
        for item in report.skipped:
            lines.append(f"  {_t(item.file)}: {_t(item.reason)}")
    return "\n".join(lines) + "\n"


def job_summary(report: Report) -> list[str]:
    """For a job of many ranks, one line first: how many ranks report each crowded finding,
    and which rank failed first with what ("4,091 ranks report ...; rank 1,377 failed first
    with ..."); nothing for a small job."""
    crowded = [f for f in report.findings if len(f.ranks) > GROUP_RANKS]
    if not crowded:
        return []
    first = report.findings[0]
    said = [f"{len(f.ranks):,} ranks report {f.title}" for f in crowded if f is not first]
    initiating = first.initiating_rank
    if isinstance(initiating, int) and not isinstance(initiating, bool):
        said.append(f"rank {initiating:,} failed first with {first.title}")
    elif first in crowded:
        said.insert(0, f"{len(first.ranks):,} ranks report {first.title}")
    return [_t("; ".join(said) + ".")]


def _finding_text(finding: Finding, verbose: bool) -> list[str]:
    """One finding for the person on call: the answer, the figures, the lines, the first check,
    the fix's action; what the rules saw and why this confidence with --verbose."""
    lines = [
        f"{finding.rank}. {_t(finding.title)}  [{_t(finding.entry)}]  "
        f"confidence {_pct(finding.confidence)}"
    ]
    if finding.quick_answer:
        lines.append(f"   {_t(finding.quick_answer)}")
    if verbose:
        lines.append(f"   rules: {_t(', '.join(finding.rules))} ({_t(finding.rule_title)})")
        lines += [f"   why: {_t(reason)}" for reason in finding.why]
        if finding.root_cause:
            lines.append(f"   root cause: {_t(finding.root_cause)}")
        for name, outputs in finding.detectors.items():
            shown = ", ".join(f"{k}={v:g}" for k, v in outputs.items() if v is not None)
            lines.append(f"   detector {_t(name)}: {_t(shown)}")
    if finding.numbers:
        lines.append(f"   numbers: {_t(_numbers(finding))}")
    if ranks := _ranks(finding):
        lines.append(f"   ranks: {_t(ranks)}")
    lines += [f"   note: {_t(note)}" for note in finding.notes]
    if finding.evidence:
        lines.append("   evidence:")
        for item in finding.evidence:
            lines.append(f"     {_t(item.file)}:{item.line}: {_t(item.text)}")
    confirm = finding.confirm
    if confirm.get("check"):
        lines.append(f"   confirm: {_t(confirm['check'])}")
        if confirm.get("code"):
            prompt = "$ " if confirm.get("language") in SHELLS else ""
            lines.append(f"     {prompt}" + _lines(confirm["code"], " " * (5 + len(prompt))))
        if confirm.get("expect"):
            lines.append(f"     expect: {_t(confirm['expect'])}")
    fix = finding.fix
    if fix.get("title"):
        lines.append(f"   fix: {_t(_fix_head(fix))}")
        for number, (code, do) in enumerate(_actions(fix), start=1):
            detail = do if verbose else _first_sentence(do)
            first, rest = (code, detail) if code else (detail, "")
            lines.append(f"     {number}. " + _lines(first, " " * 8))
            if rest:
                lines.append("        " + _lines(rest, " " * 8))
    for step in finding.verify:
        lines.append("   verify: " + _lines(step if verbose else _first_sentence(step), " " * 8))
    if finding.url:
        lines.append(f"   more: {_t(finding.url)}")
    for other in finding.competing:
        lines.append(f"   competing: {_t(other.entry)} ({_pct(other.confidence)}): {_t(other.why)}")
    return lines


def _md(value: Any) -> str:
    """Prose in GitHub Markdown (titles, reasons, fix steps): shown as the same characters."""
    return report_text(value, "markdown")


def _code(value: Any, limit: int | None = None) -> str:
    """Log text, file names and ids in GitHub Markdown: an inline code span."""
    return report_text(value, "code", limit=limit)


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _prose(value: Any) -> str:
    """An entry's prose in GitHub Markdown: its `code spans` as real inline code, the rest
    shown as the same characters."""
    text = str(value)
    out: list[str] = []
    at = 0
    for span in _CODE_SPAN.finditer(text):
        out += [_md(text[at : span.start()]), _code(span.group(1))]
        at = span.end()
    return "".join([*out, _md(text[at:])])


def _fenced(code: str, language: str, indent: str) -> list[str]:
    """Code as a fenced block (a fence longer than any backtick run in it), each line escaped."""
    fence = "`" * max(3, max((len(r) for r in re.findall("`+", code)), default=0) + 1)
    tag = language if re.fullmatch(r"[A-Za-z0-9_+-]{1,20}", language or "") else ""
    body = [indent + report_text(line) for line in code.split("\n")]
    return [f"{indent}{fence}{tag}", *body, f"{indent}{fence}"]


# An entry's page address as a Markdown link target: a plain URL that cannot end the link early.
_LINKABLE = re.compile(r"(?:https?|file)://[A-Za-z0-9\-._~:/?#@!$&'*+,;=%]+")


def _entry_link(finding: Finding) -> str:
    """The entry, linked to its page when the address is a plain http(s) or file URL."""
    url = finding.url
    if url and _LINKABLE.fullmatch(url):
        return f"[{_md(finding.entry)}]({url})"
    return _code(finding.entry) + (f" ({_code(url)})" if url else "")


def format_markdown(report: Report, verbose: bool = False) -> str:
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
            why = f", shared words: {', '.join(map(_code, item.shared))}" if item.shared else ""
            out.append(
                f"- {_code(item.entry)} (similarity {_pct(item.score)}{why}): {_code(item.line)}"
            )
    for finding in report.findings:
        out += ["", *_finding_markdown(finding, verbose)]
    if report.skipped:
        out += ["", "## Skipped", ""]
        out += [f"- {_code(s.file)}: {_md(s.reason)}" for s in report.skipped]
    return "\n".join(out) + "\n"


def _finding_markdown(finding: Finding, verbose: bool) -> list[str]:
    """The same content as the text report; code fenced, evidence lines whole (inline code
    wraps where a table cell or a fenced block would cut or scroll)."""
    out = [f"## {finding.rank}. {_md(finding.title)}", ""]
    if finding.quick_answer:
        out += [_prose(finding.quick_answer), ""]
    facts = [f"- **Entry:** {_entry_link(finding)}, confidence {_pct(finding.confidence)}"]
    if verbose:
        facts.append(f"- **Rules:** {', '.join(_code(rule) for rule in finding.rules)}")
        facts += [f"- **Why:** {_md(reason)}" for reason in finding.why]
        if finding.root_cause:
            facts.append(f"- **Root cause:** {_prose(finding.root_cause)}")
    if finding.numbers:
        numbers = ", ".join(f"{_code(k)} {_md(v.shown())}" for k, v in finding.numbers.items())
        facts.append(f"- **Numbers:** {numbers}")
    if ranks := _ranks(finding):
        facts.append(f"- **Ranks:** {_md(ranks)}")
    facts += [f"- **Note:** {_md(note)}" for note in finding.notes]
    out += facts
    if finding.evidence:
        out += ["", "**Evidence:**", ""]
        out += [f"- {_code(f'{e.file}:{e.line}')} {_code(e.text)}" for e in finding.evidence]
    confirm = finding.confirm
    if confirm.get("check"):
        out += ["", f"**Confirm:** {_prose(confirm['check'])}", ""]
        if confirm.get("code"):
            out += [*_fenced(confirm["code"], confirm.get("language", ""), ""), ""]
        if confirm.get("expect"):
            out += [f"Expect: {_prose(confirm['expect'])}"]
    fix = finding.fix
    if fix.get("title"):
        out += ["", f"**Fix: {_prose(_fix_head(fix))}**", ""]
        for number, (code, do) in enumerate(_actions(fix), start=1):
            detail = _prose(do if verbose else _first_sentence(do))
            if code:  # the action first: the item opens with its code, the detail after
                fenced = _fenced(code, "", "   ")
                out += [f"{number}. {fenced[0].lstrip()}", *fenced[1:], f"   {detail}"]
            else:
                out += [f"{number}. {detail}"]
    if finding.verify:
        out += ["", "**Verify:**", ""]
        out += [
            f"- {_prose(step if verbose else _first_sentence(step))}" for step in finding.verify
        ]
    if finding.competing:
        out += ["", "**Competing hypotheses:**", ""]
        out += [
            f"- {_code(o.entry)} ({_pct(o.confidence)}): {_md(o.why)}" for o in finding.competing
        ]
    return out


def format_json(report: Report, verbose: bool = False) -> str:
    """The report's JSON shape (docs/diagnose.md), for scripts."""
    return json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"


@dataclass(frozen=True)
class Format:
    """An output format of `trainwreck diagnose --format NAME`."""

    name: str
    render: Callable[[Report, bool], str]  # (report, verbose)
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


def render(report: Report, fmt: str, verbose: bool = False) -> str:
    """The report in the format named `fmt` (a key of FORMATS); `verbose` adds each finding's
    rules, confidence reasons, root cause and detector outputs (JSON always holds them)."""
    return FORMATS[fmt].render(report, verbose)
