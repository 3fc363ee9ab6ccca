"""The Prometheus rule-file format (`groups: [{name, rules: [{alert, expr, for, labels,
annotations}]}]`), which the Prometheus server and the Loki ruler both read, and the escaping
that keeps contributed text inert in it.

Contributed text (entry titles, quick answers) reaches three interpreters here: YAML (handled by
yaml.safe_dump, which quotes whatever needs it), the query languages (`quote_string`), and the Go
templates that Prometheus and Loki expand in annotations and labels (`template_text`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

# Alert and label names must be valid metric / label names (rulefmt checks them).
_NAME_INVALID = re.compile(r"[^A-Za-z0-9_]+")
LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DURATION = re.compile(r"(?:\d+(?:ms|[smhdwy]))+\Z")


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule: `alert` is its name, `expr` the query, `labels` and `annotations`
    plain text (escaped when written)."""

    alert: str
    expr: str
    for_: str = "0m"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {name: template_text(value) for name, value in self.labels.items()},
            "annotations": {
                name: template_text(value) for name, value in self.annotations.items() if value
            },
        }


@dataclass(frozen=True)
class RecordingRule:
    """A recording rule: `record` names the series `expr` computes (no contributed text)."""

    record: str
    expr: str

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.record, "expr": self.expr}


def alert_name(*parts: str) -> str:
    """A valid alert name from words and ids: `alert_name("trainwreck", "nan-loss")` is
    `TrainwreckNanLoss` (ids are kebab-case; anything else is dropped)."""
    words = [w for part in parts for w in _NAME_INVALID.split(part) if w]
    name = "".join(w[:1].upper() + w[1:] for w in words)
    return name if name and not name[0].isdigit() else "Trainwreck" + name


def quote_string(text: str) -> str:
    """`text` as a double-quoted string of PromQL and LogQL (both unquote with Go's
    strconv.Unquote rules): backslash, quote and control characters escaped."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def template_text(text: str) -> str:
    """`text` as a Go template that prints itself: every `{{` becomes an action printing `{{`
    (annotations and labels are templates in Prometheus and the Loki ruler)."""
    return str(text).replace("{{", '{{ "{{" }}')


def check_duration(value: str, what: str) -> str:
    """`value` when it is a Prometheus duration (5m, 1h30m), else ValueError naming `what`."""
    if not DURATION.match(value):
        raise ValueError(f"{what} {value!r} is not a duration such as 30s, 5m or 1h")
    return value


def check_label_names(names: Sequence[str]) -> tuple[str, ...]:
    bad = [n for n in names if not LABEL_NAME.match(n)]
    if bad:
        raise ValueError(f"not a label name: {', '.join(map(repr, bad))}")
    return tuple(names)


def dump(group: str, rules: Sequence[AlertRule | RecordingRule], header: str = "") -> str:
    """The rule file: one group, YAML that safe_load reads back as written."""
    document = {"groups": [{"name": group, "rules": [rule.to_dict() for rule in rules]}]}
    body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + body
