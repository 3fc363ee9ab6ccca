"""What the MCP tools do, over the diagnose, explain and knowledge APIs (no MCP dependency).

Read-only by construction: logs are read, never written; the checkout's rules are compiled in
memory (a cached bundle is read, never written); no notebook runs and nothing reaches the
network. Bad arguments raise ToolInputError with one line, which the server returns as an MCP
error result. Paths go through diagnose's own input rules (folders, globs, .gz; special files
inside folders are skipped) and messages; a special file named directly is refused, because a
FIFO would hold the call until its time limit.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck import formats
from trainwreck.compile.bundle import BundleError
from trainwreck.compile.packs import RuleSet, resolve
from trainwreck.diagnose import diagnose
from trainwreck.errors import UsageError
from trainwreck.explain import explain, format_text
from trainwreck.knowledge import KnowledgeBase
from trainwreck.mcp.entries import entry_markdown, summary_markdown
from trainwreck.rules.rule import Rule, read_rules
from trainwreck.sanitize import report_text

MAX_TEXT = 8 << 20  # characters of a pasted log diagnosed (its end: failures are at the end)
MAX_PATHS = 64
MAX_QUERY = 4096  # characters of a search query
MAX_RESULTS = 10
PASTED = "<pasted text>"
ENTRY_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,127}\Z")


class ToolInputError(UsageError):
    """A tool's arguments cannot be used; the message says which and why."""


@dataclass(frozen=True)
class DiagnoseResult:
    summary: str  # a few lines for a person
    report: dict[str, Any]  # exactly what `trainwreck diagnose --format json` prints
    notes: list[str] = field(default_factory=list)  # what was cut or skipped


@dataclass(frozen=True)
class ExplainResult:
    summary: str
    explanations: list[dict[str, Any]]  # one per rule, as `trainwreck explain --format json`
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EntryHit:
    entry: str
    title: str
    quick_answer: str
    url: str
    why: str  # "rule X matched" or "similar words (score 0.42)"


@dataclass(frozen=True)
class SearchResult:
    hits: list[EntryHit]
    notes: list[str] = field(default_factory=list)


def _pasted(text: str, notes: list[str]) -> bytes:
    if len(text) > MAX_TEXT:
        notes.append(
            f"the text has {len(text):,} characters; only its last {MAX_TEXT:,} were diagnosed"
        )
        text = text[-MAX_TEXT:]
    return text.encode("utf-8", "replace")


def _streams(data: bytes | None) -> list[tuple[str, Any]]:
    """A fresh stream of the pasted text for each scan (a scan closes what it read)."""
    return [] if data is None else [(PASTED, io.BytesIO(data))]


def _checked_paths(paths: list[str]) -> list[str]:
    if len(paths) > MAX_PATHS:
        raise ToolInputError(f"{len(paths)} paths given; at most {MAX_PATHS} per call")
    for item in paths:
        if not isinstance(item, str) or not item or "\x00" in item:
            raise ToolInputError("every path must be a non-empty string")
        if item == "-":
            raise ToolInputError("'-' (stdin) is the MCP channel itself; pass `text` instead")
        try:
            mode = os.stat(item).st_mode
        except OSError:
            continue  # a glob, or missing: diagnose says which
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ToolInputError(f"{report_text(item)}: not a regular file or folder")
    return paths


def _inputs(
    text: str | None, paths: list[str] | None, notes: list[str]
) -> tuple[list[str], bytes | None]:
    if not text and not paths:
        raise ToolInputError("give `text` (a pasted log) or `paths` (files or folders)")
    if text is not None and not isinstance(text, str):
        raise ToolInputError("`text` must be a string")
    if paths is not None and not isinstance(paths, list):
        raise ToolInputError("`paths` must be a list of strings")
    data = _pasted(text, notes) if text else None
    return _checked_paths(list(paths or [])), data


class Tools:
    """The tools over one checkout (or the installed rule packs), read once."""

    def __init__(self, root: str | Path = ".", *, use_installed: bool = True) -> None:
        self.root = Path(root)
        self.kb = KnowledgeBase.load(self.root) if (self.root / "entries").is_dir() else None
        try:
            self.rule_set: RuleSet = resolve(
                self.root, None, use_installed=use_installed, source=self.kb, write_cache=False
            )
        except BundleError as exc:
            raise UsageError(str(exc)) from None
        rules, _ = read_rules(self.rule_set.rules)
        self.rules: dict[str, Rule] = {rule.id: rule for rule in rules}

    # --- tools ------------------------------------------------------------------------------

    def diagnose(self, text: str | None = None, paths: list[str] | None = None) -> DiagnoseResult:
        notes: list[str] = []
        checked, data = _inputs(text, paths, notes)
        report = diagnose(checked, self.root, rule_set=self.rule_set, streams=_streams(data))
        notes += [f"{s.file}: {s.reason}" for s in report.skipped]
        notes += list(report.warnings)
        data = json.loads(formats.format_json(report))
        return DiagnoseResult(_summary(data), data, [report_text(n) for n in notes])

    def explain(
        self, rule: str, text: str | None = None, paths: list[str] | None = None
    ) -> ExplainResult:
        ids = self._rule_ids(rule)
        notes: list[str] = []
        checked, pasted = _inputs(text, paths, notes)
        explained = []
        lines = []
        for rule_id in ids:
            data = explain(
                checked,
                rule_id,
                self.root,
                rule_set=self.rule_set,
                kb=self.kb,
                streams=_streams(pasted),
            )
            explained.append(data.to_json())
            lines.append(format_text(data).rstrip())
        return ExplainResult("\n\n".join(lines), explained, notes)

    def search_entries(self, query: str, limit: int = 5) -> SearchResult:
        if not isinstance(query, str) or not query.strip():
            raise ToolInputError("`query` must be an error line or some words")
        limit = max(1, min(int(limit), MAX_RESULTS))
        notes = []
        if len(query) > MAX_QUERY:
            notes.append(
                f"the query has {len(query):,} characters; its first {MAX_QUERY:,} were used"
            )
            query = query[:MAX_QUERY]
        hits: dict[str, EntryHit] = {}
        report = diagnose(
            [], self.root, rule_set=self.rule_set, streams=_streams(_pasted(query, []))
        )
        for finding in report.findings:
            hits.setdefault(
                finding.entry, self._hit(finding.entry, f"rule {finding.rule} matches this text")
            )
        if self.rule_set.text_index:
            from trainwreck.engine import suggest

            index = suggest.Index.from_counts(self.rule_set.text_index)
            lines = [
                suggest.ErrorLine(PASTED, n, line)
                for n, line in enumerate(query.splitlines() or [query], 1)
            ]
            for found in suggest.suggest(lines, index, top=limit, min_score=0.1):
                hits.setdefault(
                    found.entry, self._hit(found.entry, f"similar words (score {found.score:.2f})")
                )
        return SearchResult(list(hits.values())[:limit], notes)

    def get_entry(self, entry_id: str) -> str:
        entry_id = self._entry_id(entry_id)
        summary = self.rule_set.entries.get(entry_id, {})
        entry = self.kb.entry(entry_id) if self.kb is not None else None
        if entry is not None:
            return entry_markdown(entry.data, str(summary.get("url") or ""))
        if summary:
            return summary_markdown(summary)
        raise ToolInputError(f"no entry '{entry_id}'{self._close(entry_id, self.entry_ids())}")

    def get_rule(self, rule_id: str) -> str:
        rule_id = self._entry_id(rule_id, "rule")
        rule = self.rules.get(rule_id)
        if rule is None:
            raise ToolInputError(f"no rule '{rule_id}'{self._close(rule_id, sorted(self.rules))}")
        return json.dumps(rule.to_dict(), indent=2, ensure_ascii=False)

    # --- helpers ----------------------------------------------------------------------------

    def entry_ids(self) -> list[str]:
        ids = set(self.rule_set.entries)
        if self.kb is not None:
            ids.update(entry.id for entry in self.kb.entries)
        return sorted(ids)

    def _hit(self, entry_id: str, why: str) -> EntryHit:
        summary = self.rule_set.entries.get(entry_id, {})
        return EntryHit(
            entry_id,
            str(summary.get("title") or entry_id),
            str(summary.get("quick_answer") or ""),
            str(summary.get("url") or ""),
            why,
        )

    def _rule_ids(self, rule: str) -> list[str]:
        rule = self._entry_id(rule, "rule or entry")
        if rule in self.rules:
            return [rule]
        ids = sorted(r.id for r in self.rules.values() if r.entry == rule)
        if not ids:
            known = sorted({*self.rules, *self.entry_ids()})
            raise ToolInputError(f"no rule or entry '{rule}'{self._close(rule, known)}")
        return ids

    @staticmethod
    def _entry_id(value: Any, what: str = "entry") -> str:
        if not isinstance(value, str) or not ENTRY_ID.match(value):
            raise ToolInputError(f"not a {what} id (kebab-case): {report_text(value, limit=80)}")
        return value

    @staticmethod
    def _close(name: str, known: list[str]) -> str:
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        return f" (did you mean {', '.join(close)}?)" if close else ""


def _summary(data: dict[str, Any]) -> str:
    """A few lines for a person: each finding, how sure, the initiating rank, the first evidence
    and the fix; or what came closest."""
    findings = data.get("findings") or []
    if not findings:
        lines = ["No known failure found."]
        for item in data.get("suggestions") or []:
            lines.append(f"Closest entry: {item['entry']} (similarity {item['score']:.2f})")
        return "\n".join(lines)
    lines = [f"{len(findings)} finding{'s' if len(findings) != 1 else ''}:"]
    for finding in findings:
        head = f"{finding.get('rank')}. {finding.get('entry')}: {finding.get('title')}"
        head += f" (confidence {float(finding.get('confidence', 0)):.2f}"
        if finding.get("initiating_rank") is not None:
            head += f", initiating rank {finding['initiating_rank']}"
        lines.append(report_text(head + ")"))
        evidence = finding.get("evidence") or []
        if evidence:
            first = evidence[0]
            lines.append(
                report_text(
                    f"   evidence {first.get('file')}:{first.get('line')}: {first.get('text', '')}",
                    limit=300,
                )
            )
        fix = (finding.get("fix") or {}).get("title")
        if fix:
            lines.append(report_text(f"   fix: {fix}"))
    return "\n".join(lines)


__all__ = [
    "DiagnoseResult",
    "EntryHit",
    "ExplainResult",
    "SearchResult",
    "ToolInputError",
    "Tools",
]
