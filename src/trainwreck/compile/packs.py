"""Where diagnose gets its rules: the rule set of bundles, in the order `diagnose` uses them (the
first bundle that defines a rule id wins):
1. `--rules PATH`: a bundle file or a rules folder;
2. a repository checkout (ROOT/rules/*.yaml): compiled in memory, cached under
   ROOT/build/rules-cache/ (or under $TRAINWRECK_CACHE_DIR) keyed by the content hash of rules,
   entries and toolkit;
3. every installed rule pack: entry points in group `trainwreck.rules`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainwreck import __version__, stamps
from trainwreck.compile.bundle import (
    Bundle,
    BundleError,
    checked_bundle,
    entry_summaries,
    load_bundle_file,
    make_bundle,
    site_url,
)
from trainwreck.model import Entry, Problem
from trainwreck.rules import regexes

if TYPE_CHECKING:
    from trainwreck.rules.model import LoadedRules

ENTRY_POINT_GROUP = "trainwreck.rules"
# The code a compiled bundle depends on (validation, normalisation, the bundle's text index).
_CODE = ("rules", "engine", "compile")


@dataclass
class RuleSet:
    """The rules diagnose runs, with entry summaries and where each came from."""

    rules: list[dict[str, Any]] = field(default_factory=list)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    text_index: dict[str, dict[str, int]] = field(default_factory=dict)  # entry -> term counts

    def add(self, bundle: Bundle) -> None:
        if bundle.data.get("toolkit_version") == __version__:
            regexes.learn(bundle.data.get("pattern_facts"))  # (see regexes.PatternFacts)
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
    package = Path(__file__).parents[1]
    for path in sorted(p for folder in _CODE for p in (package / folder).glob("*.py")):
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
    write_cache: bool = True,
) -> tuple[Bundle, list[Problem]]:
    """Compile a rules folder in memory (no regression tests), using the build/ cache.
    `source`: the rules folder's rules and the entries, already read (else read here).
    `write_cache=False`: read a cached bundle but never write one (the read-only MCP server)."""
    rules_dir = rules_dir or root / "rules"
    key = content_hash(root, rules_dir)
    cache_file = stamps.cache_dir(root) / "rules-cache" / f"{key}.json"
    if cache and cache_file.is_file():
        try:
            cached = json.loads(cache_file.read_text(encoding="utf-8"))
            return checked_bundle(cached["bundle"], str(rules_dir)), [
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
    if cache and write_cache:
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
    from importlib import metadata  # (here: --no-installed and --rules do not pay for it)

    try:
        points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken installation must not stop diagnosis
        return [], [f"cannot list installed rule packs: {exc}"]
    for point in sorted(points, key=lambda p: p.name):
        try:
            loaded = point.load()
            value = loaded() if callable(loaded) else loaded
            if isinstance(value, dict):
                bundles.append(checked_bundle(value, f"package {point.name}"))
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
    write_cache: bool = True,
) -> RuleSet:
    """The rule set diagnose uses (see the module docstring for the order). `source`: the
    checkout's rules and entries when a stage has them already. `write_cache=False`: a
    checkout's cached bundle is read but never written."""
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
            bundle, problems = compile_folder(root, source=source, write_cache=write_cache)
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
