"""Suggestions when no rule fires: the closest entries to a log's error lines, by text similarity.

A rule fires only on what its author foresaw. When none fires but the log holds error-like lines
(a traceback, an `...Error:`, `FAILED`, `WARN`, a signal, a non-zero exit code), diagnose still
points at the entries whose own words are closest to those lines, marked as suggestions and never
as findings.

The index is built when the bundle is compiled: for each entry, the counts of the terms in its
title, summary, quick answer, root causes and observed symptoms and in the titles and sourced
examples of its rules (`text_index` in the bundle). At diagnose time the counts of every loaded bundle are merged
and weighted by TF-IDF with numpy; each error line is compared with each entry by cosine
similarity and an entry scores its best line. Terms are lowercase words of three or more
letters, so numbers, addresses and pids do not count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from trainwreck.findings import Suggestion
from trainwreck.rules.rule import Rule

MIN_SCORE = 0.2  # cosine similarity below which an entry is not suggested
TOP = 3  # suggestions shown at most
SHARED_TERMS = 4  # words shown as the why of a suggestion
CONTEXT_LINES = 8  # traceback lines above an error line read with it
_FRAME = re.compile(rb'File "[^"]*", line \d+')
MAX_LINES = 400  # error-like lines compared per diagnose
READ_LIMIT = 64 << 20  # bytes of each log read when looking for error lines

_TERM = re.compile(r"[a-z][a-z0-9_]{2,}")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "from",
        "that",
        "this",
        "are",
        "was",
        "were",
        "not",
        "but",
        "has",
        "have",
        "had",
        "its",
        "into",
        "than",
        "then",
        "when",
        "which",
        "while",
        "will",
        "can",
        "could",
        "should",
        "would",
        "may",
        "might",
        "all",
        "any",
        "one",
        "each",
        "per",
        "you",
        "your",
        "our",
        "their",
        "there",
        "here",
        "what",
        "how",
        "why",
        "also",
        "only",
        "more",
        "most",
        "such",
        "use",
        "used",
        "using",
        "file",
        "line",
        "lib",
        "site",
        "packages",
        "python",
        "usr",
        "local",
        "opt",
        "home",
        "dist",
        "self",
        "none",
        "true",
        "false",
    ]
)
# What makes a line error-like (RE2: linear time over large logs).
ERROR_LINE = (
    r"Traceback \(most recent call last\)|Error|Exception|Errno \d+\]|FAILED|FATAL|WARN"
    r"|Killed|Segmentation fault|core dumped|terminate called|Aborted|NVRM: Xid|\bSIG[A-Z]{2,5}\b"
    r"|signal:? \d+|exit(?:ed with)? (?:code|status)[: ]+-?[1-9]|exitcode\s*: -?[1-9]"
)


def terms(text: str) -> list[str]:
    return [t for t in _TERM.findall(text.lower()) if t not in _STOP]


def build_text_index(
    rules: Iterable[Rule], entries: dict[str, dict[str, Any]]
) -> dict[str, dict[str, int]]:
    """Per entry, the counts of its terms (what the bundle stores as `text_index`)."""
    texts: dict[str, list[str]] = {}
    for entry_id, summary in entries.items():
        parts = [
            summary.get("title", ""),
            summary.get("summary", ""),
            summary.get("quick_answer", ""),
        ]
        parts += list(summary.get("root_causes") or []) + list(summary.get("symptoms") or [])
        texts.setdefault(entry_id, []).extend(str(p) for p in parts)
    for rule in rules:
        parts = [rule.title] + [e.get("text", "") for e in rule.examples]
        texts.setdefault(rule.entry, []).extend(str(p) for p in parts)
    return {
        entry_id: dict(sorted(Counter(terms(" ".join(parts))).items()))
        for entry_id, parts in sorted(texts.items())
    }


@dataclass
class Index:
    entries: list[str]
    vocabulary: dict[str, int]
    idf: np.ndarray
    matrix: np.ndarray  # entries x terms, rows L2-normalised TF-IDF

    @classmethod
    def from_counts(cls, counts: dict[str, dict[str, int]]) -> Index:
        entries = sorted(e for e, c in counts.items() if c)
        vocabulary = {t: i for i, t in enumerate(sorted({t for e in entries for t in counts[e]}))}
        tf = np.zeros((len(entries), len(vocabulary)))
        for row, entry_id in enumerate(entries):
            for term, count in counts[entry_id].items():
                tf[row, vocabulary[term]] = 1.0 + np.log(count)
        documents = np.count_nonzero(tf, axis=0)
        idf = np.log((1.0 + len(entries)) / (1.0 + documents)) + 1.0
        matrix = tf * idf
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return cls(entries, vocabulary, idf, matrix / np.where(norms > 0, norms, 1.0))

    def scores(self, text: str) -> np.ndarray:
        vector = np.zeros(len(self.vocabulary))
        for term, count in Counter(terms(text)).items():
            column = self.vocabulary.get(term)
            if column is not None:
                vector[column] = (1.0 + np.log(count)) * self.idf[column]
        norm = np.linalg.norm(vector)
        if norm == 0 or not self.entries:
            return np.zeros(len(self.entries))
        return self.matrix @ (vector / norm)

    def shared(self, text: str, entry_id: str, most: int = SHARED_TERMS) -> tuple[str, ...]:
        """The words of `text` that weigh most in its similarity to the entry: the why."""
        row = self.matrix[self.entries.index(entry_id)]
        weights = {
            term: row[column] * self.idf[column]
            for term in set(terms(text))
            if (column := self.vocabulary.get(term)) is not None and row[column] > 0
        }
        return tuple(sorted(weights, key=lambda t: (-weights[t], t))[:most])


class ErrorLine(NamedTuple):
    """An error-like line of a log, with the lines of its traceback above it (`context`):
    a bare `KeyError: 'name'` says little, the frame that raised it says where."""

    display: str
    line: int
    text: str
    context: str = ""


def suggest(
    lines: list[ErrorLine],
    index: Index,
    *,
    top: int = TOP,
    min_score: float = MIN_SCORE,
) -> list[Suggestion]:
    """The entries closest to the error lines (each read with its context), best first."""
    best: dict[str, tuple[float, str, str]] = {}
    for item in lines:
        scored = f"{item.context}\n{item.text}" if item.context else item.text
        scores = index.scores(scored)
        for row in np.flatnonzero(scores >= min_score):
            entry_id = index.entries[row]
            score = float(scores[row])
            if entry_id not in best or score > best[entry_id][0]:
                best[entry_id] = (score, f"{item.display}:{item.line}: {item.text[:200]}", scored)
    ranked = sorted(best.items(), key=lambda item: -item[1][0])[:top]
    return [
        Suggestion(e, round(s, 3), line, index.shared(scored, e)) for e, (s, line, scored) in ranked
    ]


def _context(shaped: bytes, start: int) -> str:
    """The lines of a traceback above the line at `start`: up to CONTEXT_LINES indented ones
    (its frames and their code), stopping at the first line that is not part of one."""
    from trainwreck.engine import prefixes

    above = shaped[max(0, start - 4096) : start].split(b"\n")[:-1]
    kept: list[str] = []
    for raw in reversed(above[-CONTEXT_LINES:]):
        body = prefixes.split_prefix(raw)[1]  # (without its indentation)
        before = raw[: len(raw) - len(body)] if body and raw.endswith(body) else b""
        if not before.endswith((b" ", b"\t")):
            break
        if not _FRAME.match(body):  # `File "x.py", line N, in f`: words of every traceback
            kept.append(body.decode("utf-8", "replace").strip())
    return "\n".join(reversed(kept))


def _error_pattern() -> Any:
    import re2

    return re2.compile(ERROR_LINE)


def error_lines(inputs: list[tuple[str, Any]], limit: int = MAX_LINES) -> list[ErrorLine]:
    """Error-like lines of the logs (files only; stdin was consumed by the scan), read through
    the paste-shape layer, with their file and line number."""
    from trainwreck.engine import prefixes
    from trainwreck.engine.reading import head_blocks

    found: list[ErrorLine] = []
    search = _error_pattern().search
    for display, source in inputs:
        number = 1  # of the first line of the block
        for block in head_blocks(source, READ_LIMIT):  # (a binary file gives none)
            shaped = prefixes.normalize_block(block)  # the same lines, reshaped
            position, counted, line = 0, 0, number
            while True:
                match = search(shaped, position)
                if match is None:
                    break
                start = shaped.rfind(b"\n", 0, match.start()) + 1
                end = shaped.find(b"\n", match.end())
                end = len(shaped) if end < 0 else end
                line += shaped.count(b"\n", counted, start)
                counted = start
                body = prefixes.split_prefix(shaped[start:end])[1]
                text = body.decode("utf-8", "replace")
                found.append(ErrorLine(display, line, text, _context(shaped, start)))
                if len(found) >= limit:
                    return found
                position = end + 1
            number += block.count(b"\n")
    return found
