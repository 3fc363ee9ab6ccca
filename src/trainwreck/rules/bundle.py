"""Rule bundles: the compiled form of a rules folder, how they are found and loaded.

A bundle is one JSON document: the validated, normalised rules (condition trees included, so the
engine never parses YAML or conditions) and each entry's summary for reports. Sources, in the
order `diagnose` uses them (the first bundle that defines a rule id wins):
1. `--rules PATH`: a bundle file or a rules folder;
2. a repository checkout (ROOT/rules/*.yaml): compiled in memory, cached under
   ROOT/build/rules-cache/ (or under $TRAINWRECK_CACHE_DIR) keyed by the content hash of rules,
   entries and toolkit;
3. every installed rule pack: entry points in group `trainwreck.rules`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from trainwreck import __version__, stamps
from trainwreck.errors import UsageError
from trainwreck.model import Entry, Problem

if TYPE_CHECKING:
    from trainwreck.rules.model import LoadedRules

FORMAT = 1
ENTRY_POINT_GROUP = "trainwreck.rules"
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


@dataclass
class RuleSet:
    """The rules diagnose runs, with entry summaries and where each came from."""

    rules: list[dict[str, Any]] = field(default_factory=list)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    text_index: dict[str, dict[str, int]] = field(default_factory=dict)  # entry -> term counts

    def add(self, bundle: Bundle) -> None:
        known = {rule["id"] for rule in self.rules}
        added = 0
        for rule in bundle.rules:
            if rule.get("id") in known:
                continue
            self.rules.append(rule)
            known.add(rule["id"])
            added += 1
        for entry_id, summary in bundle.entries.items():
            self.entries.setdefault(entry_id, summary)
        for entry_id, counts in bundle.text_index.items():
            if isinstance(counts, dict):
                merged = self.text_index.setdefault(entry_id, {})
                for term, count in counts.items():
                    if isinstance(count, int):
                        merged[term] = merged.get(term, 0) + count
        self.sources.append(f"{bundle.source} ({added} rules)")


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
            "steps": [_step_text(s) for s in primary.get("steps") or []],
        },
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
    from trainwreck.rules.suggest import build_text_index

    payload = {"rules": rules, "entries": entries}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return {
        "text_index": build_text_index(rules, entries),
        "format": FORMAT,
        "name": name,
        "version": version,
        "toolkit_version": __version__,
        "site_url": base_url,
        "hash": digest,
        **payload,
    }


def load_bundle_file(path: Path) -> Bundle:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{path}: not a readable rule bundle ({exc})") from None
    return _checked(data, str(path))


def _checked(data: Any, source: str) -> Bundle:
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("rules"), list)
    ):
        raise BundleError(f"{source}: not a trainwreck rule bundle of format {FORMAT}")
    return Bundle(data, source)


def content_hash(root: Path, rules_dir: Path) -> str:
    digest = hashlib.sha256(f"{__version__}\n{site_url(root)}\n".encode())
    schema = root / "schemas" / "rule.schema.json"
    for path in [
        schema,
        *sorted(rules_dir.glob("*.yaml")),
        *sorted((root / "entries").glob("*.yaml")),
    ]:
        try:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        except OSError:
            continue
    code = Path(__file__).parent
    for path in sorted(code.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


class RuleSource(Protocol):
    """Rules and entries already read (a `trainwreck.knowledge.KnowledgeBase` is one): read
    only when the cache misses."""

    @property
    def rules(self) -> LoadedRules: ...

    @property
    def entries(self) -> list[Entry]: ...


def compile_folder(
    root: Path,
    rules_dir: Path | None = None,
    *,
    cache: bool = True,
    source: RuleSource | None = None,
) -> tuple[Bundle, list[Problem]]:
    """Compile a rules folder in memory (no regression tests), using the build/ cache.
    `source`: the rules folder's rules and the entries, already read (else read here)."""
    rules_dir = rules_dir or root / "rules"
    key = content_hash(root, rules_dir)
    cache_file = stamps.cache_dir(root) / "rules-cache" / f"{key}.json"
    if cache and cache_file.is_file():
        try:
            cached = json.loads(cache_file.read_text(encoding="utf-8"))
            return _checked(cached["bundle"], str(rules_dir)), [
                Problem(**p) for p in cached["problems"]
            ]
        except (OSError, ValueError, KeyError, TypeError, BundleError):
            pass
    if source is None:
        from trainwreck.rules.model import load_rules

        loaded, known = load_rules(root, rules_dir), None
    else:
        loaded, known = source.rules, source.entries
    entries = entry_summaries(root, {rule["entry"] for rule in loaded.rules}, known)
    data = make_bundle(loaded.rules, entries, base_url=site_url(root))
    if cache:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            for old in cache_file.parent.glob("*.json"):
                old.unlink(missing_ok=True)
            tmp = cache_file.with_suffix(".tmp")
            tmp.write_text(
                json.dumps({"bundle": data, "problems": [p.to_json() for p in loaded.problems]}),
                encoding="utf-8",
            )
            tmp.replace(cache_file)
        except OSError:
            pass  # a read-only checkout still diagnoses
    return Bundle(data, str(rules_dir)), loaded.problems


def installed_bundles() -> tuple[list[Bundle], list[str]]:
    """Every installed rule pack (entry point group trainwreck.rules)."""
    bundles: list[Bundle] = []
    warnings: list[str] = []
    try:
        points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken installation must not stop diagnosis
        return [], [f"cannot list installed rule packs: {exc}"]
    for point in sorted(points, key=lambda p: p.name):
        try:
            loaded = point.load()
            value = loaded() if callable(loaded) else loaded
            if isinstance(value, dict):
                bundles.append(_checked(value, f"package {point.name}"))
            else:
                bundle = load_bundle_file(Path(str(value)))
                bundles.append(Bundle(bundle.data, f"package {point.name}"))
        except Exception as exc:
            warnings.append(f"rule pack '{point.name}' could not be loaded: {exc}")
    return bundles, warnings


def resolve(
    root: Path,
    explicit: list[str] | None = None,
    *,
    use_installed: bool = True,
    source: RuleSource | None = None,
) -> RuleSet:
    """The rule set diagnose uses (see the module docstring for the order). `source`: the
    checkout's rules and entries when a stage has them already."""
    rule_set = RuleSet()
    for item in explicit or []:
        path = Path(item)
        if path.is_dir():
            folder_root = path.parent if path.name == "rules" else root
            bundle, problems = compile_folder(folder_root, path, cache=False)
            rule_set.warnings.extend(
                f"{p} (rule skipped)" for p in problems if p.severity == "error"
            )
        elif path.is_file():
            bundle = load_bundle_file(path)
        else:
            raise BundleError(f"--rules {item}: no such file or folder")
        rule_set.add(bundle)
    if not explicit:
        if (root / "rules").is_dir() and any((root / "rules").glob("*.yaml")):
            bundle, problems = compile_folder(root, source=source)
            rule_set.warnings.extend(
                f"{p} (rule skipped)" for p in problems if p.severity == "error"
            )
            rule_set.add(bundle)
        if use_installed:
            bundles, warnings = installed_bundles()
            rule_set.warnings.extend(warnings)
            for bundle in bundles:
                rule_set.add(bundle)
    return rule_set
