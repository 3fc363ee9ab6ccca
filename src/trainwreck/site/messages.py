"""'Messages this failure prints': the lines an entry's rules recognise, as text on its page,
so the site's search finds the page from a pasted error line."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from trainwreck.site.rule_pages import Rule
from trainwreck.site.text import ANSI_RE, fenced, indented

# "Messages this failure prints": lines shown per rule, and the log bytes read to find them.
MAX_MESSAGES_PER_RULE = 6
MAX_MESSAGE_CHARS = 500
MAX_MESSAGE_LOG_BYTES = 1 << 20
# Launcher prefixes in front of a message ("[rank3]:", "[default0]:[rank0]: ").
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)+")


def _rule_messages(root: Path, rule: Rule) -> list[str]:
    """The lines a rule recognises: its documented examples when it has them, else the lines its
    regex matchers match in the regression logs it must match (tests.match)."""
    found = _documented(rule)
    if not found:
        patterns = _evidence_patterns(rule)
        logs = _match_logs(root, rule)
        for pattern in patterns:
            for log in logs:
                found.extend(line for line in log if pattern.search(line))
    return _readable(found)


def _documented(rule: Rule) -> list[str]:
    found: list[str] = []
    for example in rule.data.get("examples") or []:
        text = example
        if isinstance(example, dict):
            text = next(
                (
                    example[k]
                    for k in ("text", "line", "message")
                    if isinstance(example.get(k), str)
                ),
                None,
            )
        if isinstance(text, str) and text.strip():
            found.append(text)
    return found


def _evidence_patterns(rule: Rule) -> list[Any]:
    """Only the matchers whose lines the rule reports as evidence, in the order it lists them
    (the failure's own message first): the others describe context (a checkpoint save that
    explains a slow step), not the failure."""
    from trainwreck.rules import regexes

    matchers = rule.data.get("matchers") if isinstance(rule.data.get("matchers"), dict) else {}
    report = rule.data.get("report") if isinstance(rule.data.get("report"), dict) else {}
    evidence = report.get("evidence") if isinstance(report.get("evidence"), list) else None
    patterns = []
    for name in evidence if evidence is not None else list(matchers):
        spec = matchers.get(name)
        spec = spec if isinstance(spec, dict) else {}
        block = spec.get("block") if isinstance(spec.get("block"), dict) else {}
        captures = block.get("capture") if isinstance(block.get("capture"), list) else []
        for pattern in [spec.get("regex"), block.get("start"), *captures, block.get("end")]:
            if isinstance(pattern, str):
                with contextlib.suppress(Exception):  # compile reports broken patterns
                    patterns.append(regexes.compile(pattern))
    return patterns


def _match_logs(root: Path, rule: Rule) -> list[list[str]]:
    """The lines of the regression logs the rule must match (inside the repository only)."""
    tests = rule.data.get("tests") if isinstance(rule.data.get("tests"), dict) else {}
    logs: list[list[str]] = []
    for name in tests.get("match") or []:
        path = root / str(name)
        if not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
            continue
        with open(path, "rb") as handle:
            logs.append(handle.read(MAX_MESSAGE_LOG_BYTES).decode("utf-8", "replace").splitlines())
    return logs


def _readable(found: list[str]) -> list[str]:
    """The lines a reader would paste: prefixes and colours gone, one per shape, capped."""
    lines: list[str] = []
    shapes: set[str] = set()
    for line in found:
        line = _RANK_PREFIX.sub("", ANSI_RE.sub("", " ".join(line.split())))
        # Traceback frames and lines that differ only in numbers (ranks, sizes, times) add
        # nothing a reader would paste.
        shape = re.sub(r"\d+", "0", line)
        if not line or line.startswith('File "') or shape in shapes:
            continue
        shapes.add(shape)
        lines.append(
            line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 1] + "…"
        )
        if len(lines) >= MAX_MESSAGES_PER_RULE:
            break
    return lines


def messages_section(root: Path, rules: list[Rule]) -> list[str]:
    """'Messages this failure prints': the recognised lines as text, so the site search finds
    the page from a pasted error line."""
    lines: list[str] = []
    seen: set[str] = set()
    for rule in rules:
        for line in _rule_messages(root, rule):
            # One line per wording: the same message with other pids, sizes or ranks would only
            # weigh the page's words more in the search index.
            wording = re.sub(r"\d+", "N", line)
            if wording not in seen:
                seen.add(wording)
                lines.append(line)
    if not lines:
        return []
    # A collapsed block in the page's opening part: the search engine ranks the opening of a
    # page above its sections, so a pasted line lands on the page that prints it.
    body = [
        "Lines the [detection rules](#detection) recognise, as the libraries print them:",
        "",
        fenced("\n".join(lines), "text"),
    ]
    return ['??? quote "Messages this failure prints"', "", indented("\n".join(body)), ""]
