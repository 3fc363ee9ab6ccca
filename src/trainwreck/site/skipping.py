"""Skipping unchanged stages of the build (see trainwreck.stamps)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from trainwreck import stamps
from trainwreck.model import Entry, Problem, load_entries
from trainwreck.reproduce.records import manifest_records
from trainwreck.site.docs import Pages


def check_stage_cached(root: Path) -> tuple[list[Entry] | None, list[Problem], int]:
    """The check stage, skipped when entries, notebooks, recordings, rules, schemas and the
    toolkit are unchanged since a check that passed (its warnings are replayed). The entries
    are then loaded only if the pages must be generated again."""
    key = (
        stamps.Key("check")
        .code()
        .tree(root / "entries", "*.yaml")
        .tree(root / "notebooks")
        .tree(root / "recordings")
        .tree(root / "rules", "*.yaml")
        .tree(root / "schemas", "*.json")
        .text(str(root))
        .hexdigest()
    )
    stamp = stamps.load(root, "check", key)
    if stamp is not None:
        try:
            return None, [Problem(**p) for p in stamp["problems"]], int(stamp["entries"])
        except (KeyError, TypeError, ValueError):
            pass
    entries, problems = check_stage(root)
    if not any(p.severity == "error" for p in problems):
        stamps.save(
            root,
            "check",
            key,
            {"problems": [p.to_json() for p in problems], "entries": len(entries)},
        )
    return entries, problems, len(entries)


def check_stage(root: Path) -> tuple[list[Entry], list[Problem]]:
    from trainwreck.check import check_entries
    from trainwreck.model import entry_files

    problems, _checked = check_entries(root, entry_files(root))
    entries, _ = load_entries(root)
    return entries, problems


def _manifest_files(root: Path, manifest: dict[str, Any] | None) -> list[Path]:
    """Files the manifest's records name (executed notebooks, metrics, logs, figures): the pages
    embed them."""
    found: set[Path] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and 0 < len(value) < 1024 and "\n" not in value:
            path = root / value
            with contextlib.suppress(OSError, ValueError):
                if path.is_file():
                    found.add(path)

    walk([record.to_json() for record in manifest_records(manifest).values()])
    return sorted(found)


def pages_key(root: Path, docs_out: Path, manifest: dict[str, Any] | None) -> str:
    key = (
        stamps.Key("pages")
        .code()
        .tree(root / "entries", "*.yaml")
        .tree(root / "notebooks")
        .tree(root / "recordings")
        .tree(root / "rules", "*.yaml")
        .tree(root / "docs")
        .tree(root / "schemas", "*.json")
        .file(root / "mkdocs.yml")
        .environment(root / "mkdocs.yml")
        .text(str(root), str(docs_out), _without_run_time(manifest))
        .text(library_versions("nh3", "markdown"))
    )
    for path in _manifest_files(root, manifest):
        key.file(path)
    return key.hexdigest()


def _without_run_time(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manifest as the pages read it: when it was written is on no page, and a key over it
    would make every build regenerate every page."""
    if manifest is None:
        return None
    return {k: v for k, v in manifest.items() if k != "generated"}


def cached_pages(root: Path, key: str, docs_out: Path) -> Pages | None:
    stamp = stamps.load(root, "pages", key)
    if stamp is None or not stamps.unchanged(stamp.get("outputs")):
        return None
    try:
        return Pages(
            entries=int(stamp["entries"]),
            indexes=int(stamp["indexes"]),
            figures=int(stamp["figures"]),
            nav=list(stamp["nav"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def save_pages(root: Path, key: str, docs_out: Path, pages: Pages) -> None:
    stamps.save(
        root,
        "pages",
        key,
        {
            "entries": pages.entries,
            "indexes": pages.indexes,
            "figures": pages.figures,
            "nav": pages.nav,
            "outputs": stamps.digests([docs_out]),
        },
    )


def library_versions(*names: str) -> dict[str, str]:
    """Installed versions of the libraries that render pages (a new one may render differently)."""
    from importlib import metadata

    versions: dict[str, str] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def site_key(root: Path, docs_out: Path, site: Path, nav: list[Any]) -> str:
    """What mkdocs reads: the generated pages, mkdocs.yml, the theme (by version) and the nav."""
    return (
        stamps.Key("site")
        .code()
        .tree(docs_out)
        .file(root / "mkdocs.yml")
        .environment(root / "mkdocs.yml")
        .text(
            library_versions("mkdocs", "mkdocs-material", "markdown", "pymdown-extensions"),
            nav,
            str(site),
        )
        .hexdigest()
    )


def cached_site(root: Path, key: str, site: Path) -> int | None:
    """HTML page count of an intact site built from the same inputs, else None."""
    stamp = stamps.load(root, "site", key)
    if stamp is None or not (site / "index.html").is_file():
        return None
    if not stamps.unchanged(stamp.get("outputs")):
        return None
    pages = stamp.get("pages")
    return pages if isinstance(pages, int) else None
