"""The build: check -> reproduce -> compile -> pages -> mkdocs build --strict."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck import stamps
from trainwreck.knowledge import KnowledgeBase
from trainwreck.model import Entry
from trainwreck.reproduce.records import Status, manifest_records, status_word
from trainwreck.sanitize import SanitizerMissing
from trainwreck.site.docs import Pages, generate_docs
from trainwreck.site.errors import BuildError
from trainwreck.site.mkdocs_build import run_mkdocs
from trainwreck.site.rule_pages import rules_from_knowledge
from trainwreck.site.skipping import (
    cached_pages,
    cached_site,
    check_stage_cached,
    pages_key,
    save_pages,
    site_key,
)
from trainwreck.site.text import first_sentence

Progress = Callable[[str], None]


@dataclass
class Summary:
    entries: int = 0
    notebooks: dict[str, int] = field(default_factory=dict)
    rules: int = 0
    pages: int = 0
    figures: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        nb = self.notebooks
        notebook_text = (
            f"{nb.get('executed', 0)} executed, {nb.get('cached', 0)} cached, "
            f"{nb.get('recorded-gpu', 0)} GPU-recorded, {nb.get('stale', 0)} stale, "
            f"{nb.get('skipped', 0)} skipped"
        )
        if nb.get("failed"):
            notebook_text += f", {nb['failed']} FAILED"
        if nb.get("not-reproducible"):
            notebook_text += f"; {nb['not-reproducible']} not reproducible"
        return [
            f"entries:   {self.entries}",
            f"notebooks: {notebook_text}",
            f"rules:     {self.rules}",
            f"pages:     {self.pages} HTML pages ({self.figures} figures)",
            f"time:      {self.seconds:.1f} s",
        ]


def count_notebooks(manifest: dict[str, Any] | None, ran: bool) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in manifest_records(manifest).values():
        if record.status is Status.PASSED:
            key = "cached" if record.cached or not ran else "executed"
        elif record.status is Status.SKIPPED_NEEDS_GPU:
            key = "skipped"
        else:
            key = str(status_word(record.status))
        counts[key] = counts.get(key, 0) + 1
    return counts


def failed_notebooks(manifest: dict[str, Any] | None) -> list[str]:
    """One line per failed notebook: where it stopped and the first sentence of why."""
    lines = []
    for record in manifest_records(manifest).values():
        if record.status is Status.FAILED:
            error = record.error
            cell = error.cell if error is not None else None
            message = error.message if error is not None and error.message is not None else ""
            lines.append(f"{record.notebook}: cell {cell}: {first_sentence(message, 200)}")
    return lines


def compile_stage(root: Path, kb: KnowledgeBase | None = None) -> int:
    """`trainwreck compile` as the command runs it (validate, run every rule's regression logs,
    write build/rules/bundle.json and the rule wheel into dist/); returns the rule count."""
    if not any((root / "rules").glob("*.yaml")):
        return 0  # nothing to compile yet (a new knowledge base); the pages say "no rule yet"
    from trainwreck.compile.command import CompileOptions, compile_pack, report

    kb = kb or KnowledgeBase.load(root)
    options = CompileOptions()
    result = compile_pack(root, options, kb=kb)
    # Its problems and its one-line result go to the terminal as they do for `trainwreck compile`.
    report(result)
    if not result.ok:
        raise BuildError("compile: the rules have errors (listed above); fix them and build again")
    # All of them validated, so the bundle holds every one; counted there, as a replayed compile
    # has not read the rules (and a build with nothing changed need not either).
    bundle = json.loads((root / options.bundle).read_text(encoding="utf-8"))
    return len(bundle["rules"])


class _Steps:
    """One build's root, progress lines and the time of each step."""

    def __init__(self, root: Path, progress: Progress | None, started: float) -> None:
        self.root = root
        self.say: Progress = progress or (lambda _line: None)
        self.mark = started

    def lap(self) -> str:
        now = time.monotonic()
        seconds, self.mark = now - self.mark, now
        return f"{seconds:.1f} s"


def build(
    root: Path | str = ".",
    *,
    reproduce: bool = True,
    jobs: int = 1,
    strict: bool = False,
    site_dir: Path | str | None = None,
    docs_dir: Path | str | None = None,
    progress: Progress | None = None,
) -> Summary:
    """check -> reproduce -> compile -> pages -> mkdocs build --strict. Raises BuildError."""
    started = time.monotonic()
    root = Path(root).resolve()
    steps = _Steps(root, progress, started)
    summary = Summary()
    if not (root / "entries").is_dir():
        raise BuildError(f"{root}: no entries/ folder; run from the repository root or pass --root")
    entries = _check_step(steps, summary, strict)
    manifest = _reproduce_step(steps, summary, reproduce, jobs, strict)

    # One knowledge base for compile and the pages: each rule and entry file is parsed once.
    kb = KnowledgeBase.load(root)
    steps.say("[3/5] compile: validating and compiling rules")
    summary.rules = compile_stage(root, kb)
    steps.say(f"  {summary.rules} rules compiled ({steps.lap()})")

    docs_out = Path(docs_dir).resolve() if docs_dir else root / "build" / "docs"
    pages = _pages_step(steps, kb, entries, manifest, docs_out)
    summary.figures = pages.figures

    site = Path(site_dir).resolve() if site_dir else root / "site"
    summary.pages = _site_step(steps, docs_out, site, pages.nav)
    summary.seconds = time.monotonic() - started
    return summary


def _check_step(steps: _Steps, summary: Summary, strict: bool) -> list[Entry] | None:
    """[1/5]: the entries valid; returns them when they had to be read (None: check skipped)."""
    steps.say("[1/5] check: validating entries")
    entries, problems, entry_count = check_stage_cached(steps.root)
    errors = [p for p in problems if p.severity == "error"]
    warnings = [p for p in problems if p.severity == "warning"]
    for problem in problems:
        steps.say(f"  {problem}")
    if errors:
        raise BuildError(f"check: {len(errors)} error(s) in entries/; fix them and build again")
    if strict and warnings:
        raise BuildError(f"check: {len(warnings)} warning(s) and --strict is set")
    summary.entries = entry_count
    summary.warnings += [str(p) for p in warnings]
    steps.say(
        f"  {entry_count} entries valid"
        + (f", {len(warnings)} warning(s)" if warnings else "")
        + f" ({steps.lap()})"
    )
    return entries


def _reproduce_step(
    steps: _Steps, summary: Summary, reproduce: bool, jobs: int, strict: bool
) -> dict[str, Any] | None:
    """[2/5]: run the notebooks (or take the last manifest); returns the manifest."""
    if reproduce:
        steps.say(f"[2/5] reproduce: notebooks whose source changed run again (-j {jobs})")
        manifest = _run_notebooks(steps, jobs)
    else:
        steps.say("[2/5] reproduce: skipped (--no-reproduce); using the last manifest")
        manifest = _last_manifest(steps)
    summary.notebooks = count_notebooks(manifest, ran=reproduce)
    if reproduce:
        steps.say(f"  notebooks done ({steps.lap()})")
    summary.failed += failed_notebooks(manifest)
    for line in summary.failed:
        steps.say(f"  FAILED {line}")
    if strict and summary.failed:
        raise BuildError(f"reproduce: {len(summary.failed)} notebook(s) failed and --strict is set")
    return manifest


def _run_notebooks(steps: _Steps, jobs: int) -> dict[str, Any]:
    try:
        from trainwreck.reproduce.runner import reproduce as run_reproduce
        from trainwreck.reproduce.targets import ReproduceError
    except ImportError as exc:
        raise BuildError(f"reproduce is not available ({exc})") from None
    try:
        return _with_progress_line(steps, jobs, run_reproduce)
    except ReproduceError as exc:
        raise BuildError(f"reproduce: {exc}") from None
    except ImportError as exc:
        raise BuildError(
            f"reproduce needs the repro extra ({exc.name} is missing): "
            "pip install 'trainwreck[repro]', or build with --no-reproduce"
        ) from None


def _with_progress_line(steps: _Steps, jobs: int, run_reproduce: Any) -> dict[str, Any]:
    """The notebooks under one progress line (with the estimate from the last manifest); each
    cell's output in build/logs/reproduce.log, failures in full."""
    from trainwreck.reproduce.progress import ProgressLine, previous_durations
    from trainwreck.reproduce.targets import discover

    build = steps.root / "build"
    log_path = build / "logs" / "reproduce.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    ids = [t.id for t in discover(steps.root, None)]
    estimates = previous_durations(
        build / "manifest.json", steps.root / "notebooks" / "durations.json"
    )
    known = sum(estimates.get(i, 0.0) for i in ids)
    steps.say(
        f"  {len(ids)} notebooks; each cell's output: {relative_to_root(log_path, steps.root)}"
        + (f"; {known / 60:.0f} min of notebook time by the last run's durations" if known else "")
    )
    with open(log_path, "w", encoding="utf-8") as log:

        def say(line: str) -> None:  # indented under the step; "\r" (rewrite in place) first
            steps.say(f"\r  {line[1:]}" if line.startswith("\r") else f"  {line}")

        in_place = bool(getattr(steps.say, "in_place", False))
        line = ProgressLine(ids, estimates, jobs, log, say, in_place=in_place)
        return run_reproduce(  # type: ignore[no-any-return]
            steps.root, None, jobs=jobs, progress=line.detail, events=line.event
        )


def _last_manifest(steps: _Steps) -> dict[str, Any] | None:
    manifest_path = steps.root / "build" / "manifest.json"
    if not manifest_path.is_file():
        steps.say("  no build/manifest.json: pages will say the notebooks have not run")
        return None
    try:
        manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BuildError(f"build/manifest.json: not valid JSON ({exc})") from None
    return manifest


def _pages_step(
    steps: _Steps,
    kb: KnowledgeBase,
    entries: list[Entry] | None,
    manifest: dict[str, Any] | None,
    docs_out: Path,
) -> Pages:
    """[4/5]: the docs dir, unless its inputs are unchanged since it was last generated."""
    root = steps.root
    steps.say("[4/5] pages: generating entry, index and tag pages")
    key = pages_key(root, docs_out, manifest)
    pages = cached_pages(root, key, docs_out)
    if pages is None:
        if entries is None:
            entries = kb.entries
        try:
            pages = generate_docs(root, docs_out, entries, manifest, rules_from_knowledge(kb))
        except SanitizerMissing as exc:
            raise BuildError(str(exc)) from None
        save_pages(root, key, docs_out, pages)
        unchanged = ""
    else:
        unchanged = "; unchanged, not regenerated"
    steps.say(
        f"  {pages.entries} entry pages, {pages.indexes} index and tag pages, {pages.figures} figures"
        f" ({steps.lap()}{unchanged})"
    )
    return pages


def _site_step(steps: _Steps, docs_out: Path, site: Path, nav: list[Any]) -> int:
    """[5/5]: mkdocs build --strict, unless the site is intact and its inputs unchanged;
    returns the HTML page count."""
    root = steps.root
    steps.say(f"[5/5] site: mkdocs build --strict into {relative_to_root(site, root)}/")
    key = site_key(root, docs_out, site, nav)
    cached = cached_site(root, key, site)
    if cached is not None:
        steps.say(f"  {cached} HTML pages ({steps.lap()}; pages, theme and mkdocs.yml unchanged)")
        return cached
    stamps.forget(root, "site")
    html_pages = run_mkdocs(root, docs_out, site, nav)
    stamps.save(root, "site", key, {"pages": html_pages, "outputs": stamps.digests([site])})
    steps.say(f"  {html_pages} HTML pages ({steps.lap()})")
    return html_pages


def relative_to_root(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
