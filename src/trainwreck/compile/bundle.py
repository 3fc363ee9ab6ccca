"""Rule bundles: the compiled form of a rules folder, and the entry summaries it carries.

A bundle is one JSON document: the validated, normalised rules (condition trees included, so the
engine never parses YAML or conditions) and each entry's summary for reports. It is the contract
with installed rule packs: what `trainwreck compile` writes into a wheel and what `diagnose`
reads back (compile/packs.py finds them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainwreck import __version__
from trainwreck.errors import UsageError
from trainwreck.model import Entry
from trainwreck.rules import regexes
from trainwreck.rules.rule import Rule

FORMAT = 1
# No published site unless one is configured: links are then left out (or point to a local
# build), never to a made-up address.
DEFAULT_SITE_URL = ""
# Reserved for documentation and testing (RFC 2606, RFC 6761): never a real site.
_PLACEHOLDER_DOMAINS = ("example.com", "example.org", "example.net")
_PLACEHOLDER_SUFFIXES = (".example", ".invalid", ".test", ".localhost", "localhost")


@dataclass
class Bundle:
    data: dict[str, Any]
    source: str

    @property
    def rules(self) -> list[dict[str, Any]]:
        return list(self.data.get("rules", []))

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return dict(self.data.get("entries", {}))

    @property
    def text_index(self) -> dict[str, dict[str, int]]:
        index = self.data.get("text_index")
        return index if isinstance(index, dict) else {}


class BundleError(UsageError):
    """A rule bundle named on the command line cannot be read (diagnose reports it, exit 2)."""


def site_url(root: Path) -> str:
    """The base URL of the published site, with a trailing slash, or "" when there is none.

    It is configured in one place, mkdocs.yml's `site_url`, either literally or as
    `site_url: !ENV [TRAINWRECK_SITE_URL, ...]` (mkdocs' environment tag: the first variable that
    is set, else the last item as the default). mkdocs.yml is read as text: it may hold python
    tags. A placeholder address (example.org and other reserved names) counts as none.
    """
    try:
        text = (root / "mkdocs.yml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return DEFAULT_SITE_URL
    found = re.search(r"^site_url:[ \t]*(.*?)[ \t]*(?:#.*)?$", text, re.MULTILINE)
    if not found:
        return DEFAULT_SITE_URL
    url = _resolve_env_tag(found.group(1).strip())
    if not is_real_site_url(url):
        return DEFAULT_SITE_URL
    return url if url.endswith("/") else url + "/"


def _resolve_env_tag(value: str) -> str:
    """`!ENV NAME` / `!ENV [NAME, OTHER, default]` as mkdocs resolves it; other values as written."""
    value = value.strip()
    if not value.startswith("!ENV"):
        return value.strip("'\"")
    rest = value[len("!ENV") :].strip()
    items = [i.strip().strip("'\"") for i in rest.strip("[]").split(",")] if rest else []
    items = [i for i in items if i]
    if not items:
        return ""
    for name in items:
        if os.environ.get(name):
            return os.environ[name]
    return items[-1] if rest.startswith("[") and len(items) > 1 else ""


def is_real_site_url(url: str) -> bool:
    """An absolute http(s) URL whose host is not a reserved placeholder name."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or "." not in host.strip("."):
        return False
    if any(host == d or host.endswith("." + d) for d in _PLACEHOLDER_DOMAINS):
        return False
    return not host.endswith(_PLACEHOLDER_SUFFIXES)


def _step_text(step: Any) -> str:
    if isinstance(step, dict):
        text = str(step.get("do", ""))
        if step.get("code"):
            text += "\n" + str(step["code"]).rstrip()
        return text
    return str(step)


def _step_parts(step: Any) -> dict[str, str]:
    if isinstance(step, dict):
        return {"do": str(step.get("do", "")), "code": str(step.get("code") or "").rstrip()}
    return {"do": str(step), "code": ""}


def _first_confirm(checks: Any) -> dict[str, str]:
    """The entry's first confirm check: what to look at, the command, what it shows."""
    first = checks[0] if isinstance(checks, list) and checks else None
    if not isinstance(first, dict):
        return {}
    return {
        key: str(first.get(key) or "").rstrip() for key in ("check", "code", "language", "expect")
    }


def entry_summary(entry_id: str, data: dict[str, Any], base_url: str) -> dict[str, Any]:
    fix = data.get("fix") or {}
    primary = fix.get("primary") or {}
    root_causes = [str(x) for x in data.get("root_causes") or []]
    return {
        "id": entry_id,
        "title": str(data.get("title", entry_id)),
        "summary": str(data.get("summary", "")),
        "severity": data.get("severity"),
        "category": data.get("category"),
        "root_cause": root_causes[0] if root_causes else str(data.get("summary", "")),
        "root_causes": root_causes,
        "fix": {
            "title": str(primary.get("title", "")),
            "when": str(primary.get("when", "")),
            "steps": [_step_text(s) for s in primary.get("steps") or []],
            # each step as its action and its code, so a report can put the one-liner first
            "actions": [_step_parts(s) for s in primary.get("steps") or []],
        },
        "confirm": _first_confirm(data.get("confirm")),
        "verify": [_step_text(s) for s in fix.get("verify") or []],
        "quick_answer": str(data.get("quick_answer", "")),
        "symptoms": [
            str(s.get("observed", "")) for s in data.get("symptoms") or [] if isinstance(s, dict)
        ],
        "url": f"{base_url}entries/{entry_id}/" if base_url else "",
        "related": [
            {"id": r.get("id"), "relation": r.get("relation")}
            for r in data.get("related") or []
            if isinstance(r, dict)
        ],
    }


def entry_summaries(
    root: Path, entry_ids: set[str] | None = None, entries: list[Entry] | None = None
) -> dict[str, dict[str, Any]]:
    """The summary of each entry (of `entries`, default every entry under ROOT/entries/ that
    parses), limited to `entry_ids` when given."""
    if entries is None:
        from trainwreck.model import load_entries

        entries, _ = load_entries(root)
    base = site_url(root)
    return {
        entry.id: entry_summary(entry.id, entry.data, base)
        for entry in entries
        if entry_ids is None or entry.id in entry_ids
    }


def make_bundle(
    rules: list[dict[str, Any]],
    entries: dict[str, dict[str, Any]],
    *,
    name: str = "trainwreck-rules",
    version: str = __version__,
    base_url: str = DEFAULT_SITE_URL,
) -> dict[str, Any]:
    from trainwreck.engine.suggest import build_text_index

    payload = {"rules": rules, "entries": entries}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return {
        "text_index": build_text_index([Rule.from_dict(rule) for rule in rules], entries),
        "pattern_facts": regexes.facts_table(rule_patterns(rules)),
        "format": FORMAT,
        "name": name,
        "version": version,
        "toolkit_version": __version__,
        "site_url": base_url,
        "hash": digest,
        **payload,
    }


def rule_patterns(rules: list[dict[str, Any]]) -> list[str]:
    """Every pattern of the rules' matchers (a regex matcher's, a block's start, end and captures)."""
    found: list[str] = []
    for rule in rules:
        for spec in rule.get("matchers", {}).values():
            found.extend(spec[key] for key in ("regex", "start", "end") if key in spec)
            found.extend(spec.get("capture", []))
    return found


def load_bundle_file(path: Path) -> Bundle:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{path}: not a readable rule bundle ({exc})") from None
    return checked_bundle(data, str(path))


def checked_bundle(data: Any, source: str) -> Bundle:
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("rules"), list)
    ):
        raise BundleError(f"{source}: not a trainwreck rule bundle of format {FORMAT}")
    return Bundle(data, source)
