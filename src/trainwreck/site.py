"""`trainwreck build` and `trainwreck serve`: publish the encyclopedia as a static site.

The build chains the stages: check (entries valid) -> reproduce (notebooks, cached) -> compile
(rules) -> pages -> `mkdocs build --strict` into site/. Pages are assembled in build/docs/: a
copy of the hand-written docs/ plus the generated pages (one per entry with its executed
reproduction and figures, index pages, tag pages, the rules page), so nothing generated lands
in the source tree.

The status shown for a reproduction comes from build/manifest.json and is checked against the
current notebook source: a page never claims a run that did not happen for the source it shows.

mkdocs, nbformat and the jupyter stack are imported only where used, so `import trainwreck.site`
stays cheap and a missing extra is one clear line, not a traceback.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import contextvars
import datetime as _dt
import functools
import html
import http.server
import json
import logging
import os
import posixpath
import re
import shutil
import socketserver
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck import stamps
from trainwreck.markup import url_problem
from trainwreck.model import DocumentError, Entry, Problem, load_entries, load_yaml
from trainwreck.sanitize import (
    SanitizerMissing,
    escape_attribute,
    escape_text,
    render_markdown,
)
from trainwreck.vocabulary import ANY_FRAMEWORK, FACETS, Facet, entry_facets, load_vocabulary

Progress = Callable[[str], None]

CATEGORY_ORDER = ("reliability", "performance", "correctness", "infrastructure")
CATEGORY_TEXT = {
    "reliability": "the job crashes or hangs",
    "performance": "the job runs slower than it should",
    "correctness": "the job runs but learns the wrong thing",
    "infrastructure": "the platform under the job fails",
}
SEVERITY_ORDER = ("critical", "high", "medium", "low")
FRAMEWORK_LABELS = {
    "pytorch": "PyTorch",
    "huggingface": "Hugging Face",
    "lightning": "Lightning",
    "deepspeed": "DeepSpeed",
    "megatron-lm": "Megatron-LM",
    "torchtitan": "torchtitan",
    "shell": "Shell",
    "other": "Other",
}
RELATION_LABELS = {
    "co-occurs": "Often seen together with",
    "confused-with": "Easily confused with",
    "causes": "Can cause",
    "caused-by": "Can be caused by",
    "see-also": "See also",
}
# The relation as seen from the other side, for reverse links.
INVERSE_RELATION = {
    "co-occurs": "co-occurs",
    "confused-with": "confused-with",
    "causes": "caused-by",
    "caused-by": "causes",
    "see-also": "see-also",
}
# A tag gets its own page only when this many entries share it: a page listing one entry helps
# nobody (the facets of the controlled vocabulary are the way in; tags are free words).
MIN_TAG_ENTRIES = 2
# "Messages this failure prints": lines shown per rule, and the log bytes read to find them.
MAX_MESSAGES_PER_RULE = 6
MAX_MESSAGE_CHARS = 500
# Launcher prefixes in front of a message ("[rank3]:", "[default0]:[rank0]: ").
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)+")
MAX_MESSAGE_LOG_BYTES = 1 << 20
# Generated paths inside the docs dir; an entry id must not collide with them.
RESERVED_IDS = {"index"}
# Hand-written pages other people own; linked from the nav only when present.
OPTIONAL_PAGES = ("rule-language.md", "probe.md")
# Notebook output shown on a page is capped; the full executed notebook is in build/.
MAX_OUTPUT_LINES = 60
LONG_CELL_LINES = 30
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ids, tags and rule ids become paths and anchors: kebab-case only (the schemas' pattern).
SLUG_RE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# A fence's info string: a language name, never attributes (`{.class onclick=...}`).
LANGUAGE_RE = re.compile(r"[A-Za-z0-9_+#.-]+")
# Figures are written next to the page only as raster images whose bytes say so.
RASTER_MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".jpg": b"\xff\xd8\xff", ".jpeg": b"\xff\xd8\xff",
                ".gif": b"GIF8"}  # fmt: skip


class BuildError(Exception):
    """A stage failed; the message is one line for the user."""


# --- small text helpers ---------------------------------------------------------------------


@dataclass
class PageLinks:
    """Resolves relative links in contributed text on one page, as mkdocs does for Markdown
    links (mkdocs never sees links inside HTML): `x.md` becomes the page's URL, and a link to
    no page is recorded as a problem of the source file."""

    page: str  # the page's path in the docs dir, e.g. "entries/nan-loss/index.md"
    source: str  # the file the text came from, for the problem
    pages: set[str]  # every page of the site, as paths in the docs dir
    broken: list[str]

    def __call__(self, href: str) -> str | None:
        path, hash_, fragment = href.partition("#")
        if not path.endswith(".md"):
            return href
        base = posixpath.dirname(self.page)
        target = posixpath.normpath(posixpath.join(base, path))
        if target not in self.pages:
            self.broken.append(f"{self.source}: link '{href}' points to no page of the site")
            return None
        # use_directory_urls: "a/b.md" is served at "a/b/", "a/index.md" at "a/".
        folder = (
            target[: -len("index.md")]
            if posixpath.basename(target) == "index.md"
            else target[:-3] + "/"
        )
        relative = posixpath.relpath(folder or ".", base or ".")
        url = "./" if relative == "." else relative.rstrip("/") + "/"
        return url + (hash_ + fragment if hash_ else "")


def _drop_page_links(href: str) -> str | None:
    return None if href.partition("#")[0].endswith(".md") else href


# The links resolver of the page being rendered (None: relative links are kept as written).
_PAGE_LINKS: contextvars.ContextVar[Callable[[str], str | None] | None] = contextvars.ContextVar(
    "trainwreck_page_links", default=None
)


def _cell(text: Any) -> str:
    """Contributed inline Markdown (a table cell, heading, list item or bold-led line): sanitised
    inline HTML on one line, pipes and every other Markdown character inert."""
    return render_markdown(text, inline=True, links=_PAGE_LINKS.get())


def _plain(text: Any) -> str:
    """Contributed plain text (titles, labels, file names): shown exactly as written."""
    return escape_text(text)


def _code(text: Any) -> str:
    """An inline code span for `text` (which may itself hold backticks), on one line."""
    value = " ".join(str(text).split())
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def _fence(code: str, language: str = "", indent: str = "") -> str:
    """A fenced code block longer than any backtick run inside `code`."""
    code = code.rstrip("\n")
    language = language if LANGUAGE_RE.fullmatch(language) else ""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    lines = [f"{ticks}{language}", *code.split("\n"), ticks]
    return "\n".join((indent + line) if line else line for line in lines)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join((prefix + line) if line.strip() else "" for line in text.split("\n"))


def _para(text: Any) -> str:
    """Contributed prose (Markdown allowed) as a sanitised HTML block; it must start a line of
    its own at the top level of the page (inline places use `_cell`)."""
    return render_markdown(text, links=_PAGE_LINKS.get())


def _first_sentence(text: str, limit: int | None = None) -> str:
    """The first sentence of `text`: a full stop inside a quoted message, a code span or
    brackets does not end it ("CUDA out of memory. Tried to allocate ..." stays one phrase).
    With `limit`, a longer sentence is cut there with an ellipsis (for error messages)."""
    sentence = _whole_first_sentence(" ".join(str(text).split()))
    if limit is None or len(sentence) <= limit:
        return sentence
    return sentence[: limit - 1].rstrip() + "…"


def _whole_first_sentence(flat: str) -> str:
    closers = {"(": ")", "[": "]"}
    stack: list[str] = []
    for index, char in enumerate(flat):
        if stack and char == stack[-1]:
            stack.pop()
        elif char in ('"', "`") and not (stack and stack[-1] == "`"):
            stack.append(char)
        elif char in closers and not (stack and stack[-1] in ('"', "`")):
            stack.append(closers[char])
        elif char in ".!?" and not stack and (index + 1 == len(flat) or flat[index + 1] == " "):
            return flat[: index + 1]
    return flat


def _summary_line(entry: Entry) -> str:
    """What a row or card shows for an entry: its one-line quick answer (entries written before
    the field existed fall back to the first whole sentence of the summary)."""
    quick = entry.data.get("quick_answer")
    if isinstance(quick, str) and quick.strip():
        return " ".join(quick.split())
    return _first_sentence(entry.data.get("summary", entry.title))


def _yaml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _date(iso: str | None) -> str:
    """'2026-11-30T01:23:45+00:00' -> '2026-11-30 01:23 UTC' (or the raw text)."""
    if not iso:
        return "an unknown date"
    try:
        moment = _dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return str(iso)
    if moment.tzinfo is not None:
        moment = moment.astimezone(_dt.timezone.utc)
        return moment.strftime("%Y-%m-%d %H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M")


# --- reproduction status -----------------------------------------------------------------------


@dataclass
class Status:
    """What the page says about the reproduction, and whether it may show the outputs."""

    kind: str  # reproduced | recorded | stale | needs-gpu | not-reproducible | failed | not-run
    label: str  # short: for index tables
    sentence: str  # the badge text
    admonition: str  # material admonition type
    show_outputs: bool  # only for a run of the current source
    record: dict[str, Any] | None = None


def current_hashes(root: Path, entry: Entry) -> set[str]:
    """The source hashes the current notebook would have at each scale (empty if unknown)."""
    reproduction = entry.reproduction
    notebook = reproduction.get("notebook")
    if not notebook:
        return set()
    try:
        from trainwreck import reproduce as _reproduce
    except ImportError:  # pragma: no cover - reproduce is part of the package
        return set()
    try:
        data = json.loads((root / notebook).read_text(encoding="utf-8"))
        return {_reproduce.source_hash(data, reproduction, scale) for scale in _reproduce.SCALES}
    except (OSError, ValueError, TypeError, AttributeError):
        return set()


def _versions(record: dict[str, Any]) -> str:
    versions = record.get("versions") or {}
    parts = []
    if versions.get("python"):
        parts.append(f"Python {versions['python']}")
    if versions.get("torch"):
        parts.append(f"torch {versions['torch']}")
    if versions.get("cuda"):
        parts.append(f"CUDA {versions['cuda']}")
    return ", ".join(parts)


def status_for(entry: Entry, record: dict[str, Any] | None, hashes: set[str]) -> Status:
    """The honest status of an entry's reproduction.

    `record` is the entry's manifest record (or None) and `hashes` the source hashes of the
    current notebook: a record whose hash is not among them ran an older notebook and is stale.
    """
    reproduction = entry.reproduction
    if "not_reproducible" in reproduction:
        reason = " ".join(str(reproduction["not_reproducible"]).split())
        return Status(
            "not-reproducible",
            "not reproducible",
            f"Not reproducible: {reason}",
            "info",
            False,
        )
    device = str(reproduction.get("device") or "cpu")
    if record is None:
        if device == "gpu":
            return Status(
                "needs-gpu",
                "needs a GPU",
                "Not yet reproduced: needs a GPU, and no GPU recording of this notebook exists yet.",
                "warning",
                False,
            )
        return Status(
            "not-run",
            "not yet run",
            "Not yet reproduced: this build has no run of the notebook "
            "(run `trainwreck build` without `--no-reproduce`).",
            "warning",
            False,
        )
    status = record.get("status")
    digest = record.get("source_hash")
    current = not hashes or digest in hashes
    host = record.get("host") or {}
    versions = _versions(record)
    with_versions = f" with {versions}" if versions else ""
    when = _date(record.get("started"))
    if status == "stale" or (status in ("passed", "recorded-gpu") and not current):
        return Status(
            "stale",
            "stale",
            "Stale: the recorded run is for an older version of the notebook; "
            "its outputs are not shown.",
            "warning",
            False,
            record,
        )
    if status == "passed":
        where = host.get("gpu") if device == "gpu" and host.get("gpu") else host.get("cpu")
        where = where or "an unknown host"
        return Status(
            "reproduced",
            "reproduced",
            f"Reproduced on {where} on {when}{with_versions}; fingerprint asserted.",
            "success",
            True,
            record,
        )
    if status == "recorded-gpu":
        gpu = host.get("gpu") or "an unknown GPU"
        driver = f", driver {host['driver']}" if host.get("driver") else ""
        return Status(
            "recorded",
            "recorded on GPU",
            f"Recorded on GPU {gpu} on {when}{with_versions}{driver}; fingerprint asserted.",
            "success",
            True,
            record,
        )
    if status == "skipped-needs-gpu":
        return Status(
            "needs-gpu",
            "needs a GPU",
            "Not yet reproduced: needs a GPU, and no GPU recording of this notebook exists yet.",
            "warning",
            False,
            record,
        )
    if status == "failed":
        error = record.get("error") or {}
        cell = error.get("cell")
        stopped = f"stopped at cell {cell}" if isinstance(cell, int) and cell >= 0 else "failed"
        message = _first_sentence(str(error.get("message") or "unknown error"), 200)
        return Status(
            "failed",
            "failed",
            f"Failed: the last run, on {when}, {stopped}: {message}",
            "failure",
            False,
            record,
        )
    return Status(
        "not-run",
        "not yet run",
        f"Not yet reproduced (manifest status {status!r}).",
        "warning",
        False,
        record,
    )


# --- notebooks ---------------------------------------------------------------------------------


@dataclass
class RenderedNotebook:
    markdown: str
    # file names written next to the page; an SVG figure is embedded in the page instead and
    # listed as "<name>.svg (inline)"
    figures: list[str] = field(default_factory=list)


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _demote_headings(markdown: str, levels: int = 2) -> str:
    """Notebook headings sit under the page's Reproduction section: '# A' becomes '### A'."""
    out = []
    fence: str | None = None
    for line in markdown.split("\n"):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker:
            if fence is None:
                fence = marker.group(1)[0]
            elif stripped.startswith(fence):
                fence = None
        if fence is None and re.match(r"#{1,6}\s", line):
            hashes = len(line) - len(line.lstrip("#"))
            line = "#" * min(6, hashes + levels) + line[hashes:]
        out.append(line)
    return "\n".join(out)


def _notebook_markdown(markdown: str) -> str:
    """A markdown cell for the page: its headings (demoted) stay page headings, so they reach
    the table of contents; everything else is sanitised as contributed prose."""
    parts: list[str] = []
    chunk: list[str] = []
    fence: str | None = None

    def flush() -> None:
        text = "\n".join(chunk).strip()
        if text:
            parts.append(_para(text))
        chunk.clear()

    for line in _demote_headings(markdown).split("\n"):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker:
            if fence is None:
                fence = marker.group(1)[0]
            elif stripped.startswith(fence):
                fence = None
        heading = re.match(r"(#{1,6})\s+(.*?)(\s+#+)?\s*$", line) if fence is None else None
        if heading:
            flush()
            parts.append(f"{heading.group(1)} {_cell(heading.group(2))}")
        else:
            chunk.append(line)
    flush()
    return "\n\n".join(parts)


def _is_image(data: bytes, suffix: str) -> bool:
    magic = RASTER_MAGIC.get(suffix.lower())
    return magic is not None and data.startswith(magic)


def _svg_figure(svg: str, alt: str) -> str:
    """An SVG figure as an <img> with a data: URL: a browser runs no script and loads nothing
    from an SVG shown as an image, and no contributed SVG becomes a file of the site's origin
    (where opening it directly would run its scripts)."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{escape_attribute(alt)}" src="data:image/svg+xml;base64,{encoded}">'


def _clip(text: str, max_lines: int = MAX_OUTPUT_LINES) -> str:
    lines = text.rstrip("\n").split("\n")
    if len(lines) <= max_lines:
        return "\n".join(lines)
    head = max_lines * 2 // 3
    tail = max_lines - head
    omitted = len(lines) - head - tail
    return "\n".join([*lines[:head], f"... ({omitted} lines omitted) ...", *lines[-tail:]])


def _text(data: Any) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


def _decode(data: Any) -> bytes:
    try:
        return base64.b64decode(_text(data))
    except ValueError:
        return b""


def render_notebook(
    notebook: dict[str, Any], out_dir: Path, *, prefix: str, show_outputs: bool
) -> RenderedNotebook:
    """Markdown for a notebook: its prose, its code, and (when `show_outputs`) its outputs.

    Figures become PNG/SVG files in `out_dir` named `<prefix>-<n>.<ext>`, referenced relative
    to a page in the same folder.
    """
    parts: list[str] = []
    figures: list[str] = []
    for cell in notebook.get("cells", []):
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type")
        source = _source(cell)
        if kind == "markdown":
            text = source
            for name, bundle in (cell.get("attachments") or {}).items():
                if not isinstance(bundle, dict):
                    continue
                for mime, ext in (("image/png", "png"), ("image/jpeg", "jpg")):
                    if mime in bundle:
                        data = _decode(bundle[mime])
                        if not _is_image(data, f".{ext}"):
                            break  # not the image it claims to be: left out
                        figure = f"{prefix}-attachment-{len(figures) + 1}.{ext}"
                        (out_dir / figure).write_bytes(data)
                        figures.append(figure)
                        text = text.replace(f"attachment:{name}", figure)
                        break
            parts.append(_notebook_markdown(text.strip()))
            continue
        if kind != "code" or not source.strip():
            continue
        tags = (cell.get("metadata") or {}).get("tags") or []
        if "injected-parameters" in tags:
            if not show_outputs:
                continue  # only an executed notebook has an injected cell
            parts.append("*Parameters injected by `trainwreck reproduce` for this run:*")
        elif "parameters" in tags:
            parts.append("*Parameters (the runner overrides these):*")
        if source.startswith("# hidden") or "trainwreck-hidden" in tags:
            continue
        lines = source.rstrip("\n").count("\n") + 1
        if lines > LONG_CELL_LINES:
            # Long cells (a worker script, an analysis) fold away; their outputs stay visible.
            parts.append(
                f'??? example "The code of this cell ({lines} lines)"\n\n'
                + _fence(source, "python", indent="    ")
            )
        else:
            parts.append(_fence(source, "python"))
        if not show_outputs:
            continue
        parts += _render_outputs(cell.get("outputs") or [], out_dir, prefix, figures)
    return RenderedNotebook("\n\n".join(p for p in parts if p.strip()), figures)


def _render_outputs(
    outputs: list[Any], out_dir: Path, prefix: str, figures: list[str]
) -> list[str]:
    """Markdown for one code cell's outputs; figures are written to `out_dir`."""
    parts: list[str] = []
    stream: list[str] = []

    def flush_stream() -> None:
        if stream:
            text = _clip(ANSI_RE.sub("", "".join(stream)))
            if text.strip():
                parts.append(_fence(text, "text"))
            stream.clear()

    for output in outputs:
        if not isinstance(output, dict):
            continue
        output_type = output.get("output_type")
        if output_type == "stream":
            stream.append(_text(output.get("text", "")))
            continue
        flush_stream()
        if output_type in ("display_data", "execute_result"):
            data = output.get("data") or {}
            png = _decode(data["image/png"]) if "image/png" in data else b""
            if _is_image(png, ".png"):
                figure = f"{prefix}-{len(figures) + 1}.png"
                (out_dir / figure).write_bytes(png)
                figures.append(figure)
                parts.append(f"![Figure {len(figures)} of the executed reproduction]({figure})")
            elif "image/svg+xml" in data:
                figures.append(f"{prefix}-{len(figures) + 1}.svg (inline)")
                parts.append(
                    _svg_figure(
                        _text(data["image/svg+xml"]),
                        f"Figure {len(figures)} of the executed reproduction",
                    )
                )
            elif "text/plain" in data:
                # text/html and other rich outputs are never published; their plain text is.
                text = _clip(ANSI_RE.sub("", _text(data["text/plain"])))
                # matplotlib's "<Figure size 640x480 with 1 Axes>" repr says nothing to a reader.
                if text.strip() and not re.fullmatch(r"<Figure size .*>", text.strip()):
                    parts.append(_fence(text, "text"))
        elif output_type == "error":
            trace = "\n".join(output.get("traceback") or []) or (
                f"{output.get('ename')}: {output.get('evalue')}"
            )
            parts.append(_fence(_clip(ANSI_RE.sub("", trace)), "text"))
    flush_stream()
    return parts


# --- rules ---------------------------------------------------------------------------------------


@dataclass
class Rule:
    id: str
    file: str
    data: dict[str, Any]
    text: str


def load_rules(root: Path) -> list[Rule]:
    """Every rule that parses (compile has already reported the ones that do not)."""
    rules = []
    for path in sorted((root / "rules").glob("*.yaml")):
        try:
            document = load_yaml(path, f"rules/{path.name}")
        except DocumentError:
            continue
        if isinstance(document.data, dict):
            rules.append(
                Rule(
                    str(document.data.get("id") or path.stem),
                    f"rules/{path.name}",
                    document.data,
                    path.read_text(encoding="utf-8"),
                )
            )
    return rules


def _describe_matcher(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "matcher"
    if "regex" in spec:
        return f"regular expression {_code(spec['regex'])}"
    if "json" in spec:
        fields = ", ".join(f"{k} = {v}" for k, v in (spec.get("json") or {}).items())
        return f"JSON lines where {_plain(fields)}" if fields else "JSON lines"
    if "block" in spec:
        block = spec.get("block") or {}
        return (
            f"a block of lines from {_code(block.get('start', ''))} "
            f"to {_code(block.get('end', ''))}"
        )
    return _plain(", ".join(sorted(spec)))


def _describe_detector(spec: Any) -> str:
    if not isinstance(spec, dict) or not spec:
        return "detector"
    kind, options = next(iter(spec.items()))
    if isinstance(options, dict):
        settings = ", ".join(f"{k}: {v}" for k, v in options.items())
        return f"{_code(kind)} ({_plain(settings)})"
    return _code(kind)


def _render_examples(examples: Any) -> list[str]:
    """What the rule recognises and since when: one row per sourced wording."""
    if not isinstance(examples, list) or not examples:
        return []
    rows = []
    for example in examples:
        if not isinstance(example, dict):
            continue
        text = str(example.get("text", "")).strip().splitlines()
        shown = text[0] + (" …" if len(text) > 1 else "") if text else ""
        rows.append(
            f"| {_code(shown[:160])} | {_cell(str(example.get('library', '')))} "
            f"| {_cell(str(example.get('versions', '')))} | {_cell(str(example.get('source', '')))} |"
        )
    return [
        "It recognises these wordings (each checked by `trainwreck compile`):",
        "",
        "| Wording | Printed by | Versions | Source |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def render_rule(rule: Rule, *, link_entry: str | None = None) -> str:
    data = rule.data
    # An explicit anchor, so the rules page can link to the rule on its entry's page.
    anchor = f" {{ #rule-{rule.id} }}" if SLUG_RE.fullmatch(rule.id) else ""
    lines = [f"### {_plain(data.get('title') or rule.id)}{anchor}", ""]
    meta = f"Rule {_code(rule.id)} in {_code(rule.file)}"
    if isinstance(data.get("confidence"), (int, float)):
        meta += f", confidence {data['confidence']:.2f} when its condition holds"
    if link_entry:
        meta += f"; diagnoses {_plain(link_entry)}"
    lines += [meta + ".", ""]
    if data.get("description"):
        lines += [_para(data["description"]), ""]
    if data.get("condition"):
        lines += ["It reports a finding when this condition holds:", ""]
        lines += [_fence(str(data["condition"]).strip(), "text"), ""]
    rows = []
    for name, spec in (data.get("matchers") or {}).items():
        rows.append(f"| {_code(name)} | matcher | {_describe_matcher(spec)} |")
    for name, spec in (data.get("series") or {}).items():
        if isinstance(spec, dict):
            what = (
                f"per-rank series of {_code(spec.get('value'))} from {_code(spec.get('matcher'))}"
            )
        else:
            what = "series"
        rows.append(f"| {_code(name)} | series | {what} |")
    for name, spec in (data.get("detectors") or {}).items():
        rows.append(f"| {_code(name)} | detector | {_describe_detector(spec)} |")
    if rows:
        lines += ["| Part | Kind | What it looks for |", "|---|---|---|", *rows, ""]
    lines += _render_examples(data.get("examples"))
    lines += [
        f'??? note "The rule\'s source: {_plain(rule.file)}"',
        "",
        _fence(rule.text, "yaml", indent="    "),
        "",
    ]
    return "\n".join(lines)


# --- entry pages -----------------------------------------------------------------------------


def _steps(steps: Iterable[Any]) -> str:
    out = []
    for number, step in enumerate(steps, 1):
        if isinstance(step, dict):
            out.append(f"{number}. {_cell(step.get('do', ''))}")
            if step.get("code"):
                out += ["", _fence(str(step["code"]), str(step.get("language") or ""), "    "), ""]
        else:
            out.append(f"{number}. {_cell(step)}")
    return "\n".join(out)


def _tier(label: str, tier: dict[str, Any]) -> str:
    lines = [f"### {label}: {_cell(tier.get('title', ''))}", ""]
    if tier.get("when"):
        lines += [f"**When:** {_cell(tier['when'])}", ""]
    lines += [_steps(tier.get("steps") or []), ""]
    if tier.get("cost"):
        lines += [f"**Cost:** {_cell(tier['cost'])}", ""]
    return "\n".join(lines)


@dataclass
class RelatedLink:
    id: str
    relation: str
    note: str | None
    reverse: bool  # only the other entry names this relation


def related_links(entries: list[Entry]) -> dict[str, list[RelatedLink]]:
    """Each entry's related entries, both the ones it names and the ones that name it."""
    known = {e.id for e in entries}
    links: dict[str, list[RelatedLink]] = {e.id: [] for e in entries}
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        for item in entry.related:
            if not isinstance(item, dict) or item.get("id") not in known:
                continue
            links[entry.id].append(
                RelatedLink(item["id"], str(item.get("relation")), item.get("note"), False)
            )
            seen.add((entry.id, item["id"]))
    for entry in entries:
        for item in entry.related:
            if not isinstance(item, dict) or item.get("id") not in known:
                continue
            other = item["id"]
            if (other, entry.id) in seen or other == entry.id:
                continue
            relation = INVERSE_RELATION.get(str(item.get("relation")), "see-also")
            links[other].append(RelatedLink(entry.id, relation, item.get("note"), True))
            seen.add((other, entry.id))
    return links


def render_reproduction(
    root: Path,
    entry: Entry,
    status: Status,
    page_dir: Path,
) -> tuple[str, int]:
    """The reproduction section and the number of figures written next to the page."""
    lines = ["## Reproduction", ""]
    # The sentence quotes contributed text (a reason, a notebook's error message).
    lines += [f'!!! {status.admonition} "Status"', "", f"    {_cell(status.sentence)}", ""]
    reproduction = entry.reproduction
    notebook_path = reproduction.get("notebook")
    if not notebook_path:
        return "\n".join(lines), 0
    if reproduction.get("note"):
        lines += [_para(reproduction["note"]), ""]
    lines += [
        "Run it yourself from a clone of the repository:",
        "",
        _fence(
            "pip install -e '.[repro]'\n"
            f"trainwreck reproduce {entry.id}\n"
            f"jupyter lab {notebook_path}",
            "bash",
        ),
        "",
    ]
    record = status.record or {}
    source: dict[str, Any] | None = None
    if status.show_outputs and record.get("executed"):
        with contextlib.suppress(OSError, ValueError):
            source = json.loads((root / record["executed"]).read_text(encoding="utf-8"))
    shown_outputs = source is not None
    missing_copy = status.show_outputs and not shown_outputs
    if source is None:
        with contextlib.suppress(OSError, ValueError):
            source = json.loads((root / notebook_path).read_text(encoding="utf-8"))
    if source is None:
        lines += [f"The notebook {_code(notebook_path)} could not be read.", ""]
        return "\n".join(lines), 0
    rendered = render_notebook(source, page_dir, prefix="figure", show_outputs=shown_outputs)
    figures = list(rendered.figures)
    if shown_outputs:
        lines += ["### The executed notebook", ""]
        lines += [
            "Below is the notebook as it ran for the status above: its code, its printed "
            "output and its figures.",
            "",
        ]
    elif missing_copy:
        lines += ["### The notebook", ""]
        lines += [
            f"The executed copy ({_code(record.get('executed'))}) is missing from this build, so the "
            f"source is shown without outputs; `trainwreck reproduce {entry.id}` restores it.",
            "",
        ]
    else:
        lines += ["### The notebook", ""]
        lines += [
            "The notebook's source is shown without outputs: there is no run of this exact "
            "source to show.",
            "",
        ]
    lines += [rendered.markdown, ""]
    if shown_outputs:
        lines += _evidence_section(root, record, page_dir, figures)
    return "\n".join(lines), len(figures)


def _evidence_section(
    root: Path, record: dict[str, Any], page_dir: Path, figures: list[str]
) -> list[str]:
    evidence = record.get("evidence") or {}
    lines: list[str] = []
    metrics = evidence.get("metrics")
    if metrics:
        with contextlib.suppress(OSError, ValueError):
            values = json.loads((root / metrics).read_text(encoding="utf-8"))
            lines += [
                "### Measured fingerprint",
                "",
                f"The run wrote these numbers to `{metrics}`:",
                "",
                _fence(_clip(json.dumps(values, indent=2), 80), "json"),
                "",
            ]
    logs = evidence.get("logs") or {}
    if logs.get("broken") or logs.get("fixed"):
        lines += ["### Training logs written by the run", ""]
        lines += [
            "The broken and fixed runs' logs are regression tests of the detection rules: "
            "the rules must diagnose the broken log as this failure and the fixed log as clean.",
            "",
        ]
        for side in ("broken", "fixed"):
            for log in (logs.get(side) or [])[:1]:
                with contextlib.suppress(OSError), open(root / log, "rb") as handle:
                    # A training log can be large; the page shows an excerpt of its start.
                    head = handle.read(64 * 1024).decode("utf-8", errors="replace")
                    text = head.rsplit("\n", 1)[0] if len(head) == 64 * 1024 else head
                    lines += [
                        f"Excerpt of `{log}` ({side} run):",
                        "",
                        _fence(_clip(ANSI_RE.sub("", text), 12), "text"),
                        "",
                    ]
    if not figures:
        for figure_path in evidence.get("figures") or []:
            source = root / str(figure_path)
            if not source.is_file():
                continue
            suffix = source.suffix.lower()
            with contextlib.suppress(OSError):
                if suffix == ".svg":
                    svg = source.read_text(encoding="utf-8", errors="replace")
                    figures.append(f"evidence-{len(figures) + 1}.svg (inline)")
                    lines += [_svg_figure(svg, f"Figure {len(figures)} written by the run"), ""]
                elif _is_image(source.read_bytes()[:16], suffix):
                    # Only raster images are copied next to the page: an .html or .svg file
                    # there would be a document of the site's origin.
                    name = f"evidence-{len(figures) + 1}{suffix}"
                    shutil.copyfile(source, page_dir / name)
                    figures.append(name)
                    lines += [f"![Figure {len(figures)} written by the run]({name})", ""]
    return lines


def render_entry(
    root: Path,
    entry: Entry,
    *,
    status: Status,
    rules: list[Rule],
    related: list[RelatedLink],
    titles: dict[str, str],
    page_dir: Path,
    tag_pages: set[str] | None = None,
    vocabulary: dict[str, Facet] | None = None,
) -> tuple[str, int]:
    """The Markdown page of one entry (and its figures written into `page_dir`)."""
    d = entry.data
    out: list[str] = [
        "---",
        # The theme prints front-matter values into <title> and <meta> as they are: HTML-escaped.
        f"title: {_yaml_string(html.escape(entry.title))}",
        f"description: {_yaml_string(html.escape(_summary_line(entry)))}",
        "---",
        "",
        f"# {_plain(entry.title)}",
        "",
    ]
    category, severity, state = (
        escape_attribute(d.get(key, "")) for key in ("category", "severity", "status")
    )
    chips = [
        f'<span class="tw-chip tw-category">{category}</span>',
        f'<span class="tw-chip tw-severity tw-severity-{severity}">severity: {severity}</span>',
        f'<span class="tw-chip tw-status">{state}</span>',
        f'<span class="tw-chip tw-repro tw-repro-{status.kind}">{status.label}</span>',
    ]
    tags = _tag_links(_tags(entry), tag_pages)
    out += [" ".join(chips), "", f"Tags: {tags}" if tags else "", ""]
    if vocabulary:
        out += [_facet_line(entry, vocabulary), ""]
    if d.get("status") == "deprecated":
        out += [
            '!!! warning "Deprecated"',
            "",
            "    Kept for history: this failure no longer applies to current versions.",
            "",
        ]
    # The admonition as the HTML mkdocs would make of it, so the sanitised block inside it stays
    # a block (indented under "!!!", it would be re-read as inline text).
    quick = d.get("quick_answer")
    opening = (
        f'<div class="tw-quick-answer">{_para(quick)}</div>'
        if isinstance(quick, str) and quick.strip()
        else ""
    )
    out += [
        '<div class="admonition abstract">',
        '<p class="admonition-title">Quick answer</p>',
        opening,
        _para(d.get("summary", "")),
        "</div>",
        "",
    ]
    out += [f"**Reproduction:** {_cell(status.sentence)} ([details](#reproduction))", ""]
    out += _messages_section(root, rules)

    if d.get("symptoms"):
        out += ["## Symptoms", "", "| What you observe | Why it happens |", "|---|---|"]
        for symptom in d["symptoms"]:
            out.append(
                f"| {_cell(symptom.get('observed', ''))} | {_cell(symptom.get('why', ''))} |"
            )
        out.append("")

    if d.get("confirm"):
        out += ["## Confirm it", "", "Work through these checks before applying a fix:", ""]
        for item in d["confirm"]:
            out.append(f"- [ ] **{_cell(item.get('check', ''))}**")
            if item.get("code"):
                out += ["", _fence(str(item["code"]), str(item.get("language") or ""), "    "), ""]
            out.append(f"    Expect: {_cell(item.get('expect', ''))}")
            out.append("")

    fix = d.get("fix") or {}
    if fix:
        out += ["## Fix", ""]
        for key, label in (
            ("primary", "Primary fix"),
            ("fallback", "Fallback"),
            ("emergency", "Emergency mitigation"),
        ):
            if isinstance(fix.get(key), dict):
                out.append(_tier(label, fix[key]))
        if fix.get("verify"):
            out += ["### Verify the fix", "", _steps(fix["verify"]), ""]

    if d.get("code_examples"):
        out += ["## Code examples", ""]
        for example in d["code_examples"]:
            label = FRAMEWORK_LABELS.get(
                str(example.get("framework")), str(example.get("framework"))
            )
            if example.get("title"):
                label = f"{label}: {example['title']}"
            body = [
                _fence(str(example.get("code", "")), str(example.get("language") or "python")),
                "",
                f"**Why it works:** {_cell(example.get('why', ''))}",
            ]
            out += [
                f'=== "{_plain(label.replace(chr(34), chr(39)))}"',
                "",
                _indent("\n".join(body)),
                "",
            ]

    scale = d.get("scale") or {}
    if scale:
        out += ["## At scale", ""]
        for key, label in (
            ("single_gpu", "One GPU or one process"),
            ("multi_gpu", "One node, several GPUs"),
            ("large_scale", "Hundreds or thousands of GPUs"),
        ):
            if scale.get(key):
                out += [f"**{label}.** {_cell(scale[key])}", ""]

    if d.get("prevention"):
        out += ["## Prevention", "", *[f"- {_cell(p)}" for p in d["prevention"]], ""]

    if d.get("mechanism") or d.get("root_causes"):
        out += ["## How it happens", ""]
        if d.get("mechanism"):
            out += [_para(d["mechanism"]), ""]
        if d.get("root_causes"):
            out += ["**Root causes:**", "", *[f"- {_cell(c)}" for c in d["root_causes"]], ""]

    fingerprint = d.get("fingerprint") or {}
    out += ["## Detection", ""]
    if fingerprint.get("signal"):
        out += [f"**Fingerprint.** {_cell(fingerprint['signal'])}", ""]
    if fingerprint.get("thresholds"):
        out += ["| Metric | Indicates this failure | Why this threshold |", "|---|---|---|"]
        for threshold in fingerprint["thresholds"]:
            out.append(
                f"| {_cell(threshold.get('metric', ''))} | {_cell(threshold.get('value', ''))} "
                f"| {_cell(threshold.get('note', ''))} |"
            )
        out.append("")
    out += [
        "Diagnose your own logs offline (nothing leaves your machine), from a clone of the "
        "repository ([how](../../diagnose.md)):",
        "",
        _fence(
            "pip install .                        # in the clone: the core, no PyTorch\n"
            "trainwreck diagnose path/to/logs/    # a file, a folder of per-rank logs, a glob\n"
            "trainwreck diagnose --format json run.log",
            "bash",
        ),
        "",
    ]
    if rules:
        out += [
            "The rule below detects this failure in training logs."
            if len(rules) == 1
            else f"The {len(rules)} rules below detect this failure in training logs.",
            "",
        ]
        out += [render_rule(rule) for rule in rules]
    else:
        out += ["No detection rule covers this failure yet.", ""]

    reproduction, figure_count = render_reproduction(root, entry, status, page_dir)
    out += [reproduction, ""]

    if d.get("affected_systems"):
        out += ["## Affected systems", "", *[f"- {_cell(s)}" for s in d["affected_systems"]], ""]

    if d.get("faq"):
        out += ["## FAQ", ""]
        for item in d["faq"]:
            out += [f"**{_cell(item.get('q', ''))}**", "", _para(item.get("a", "")), ""]

    if d.get("references"):
        out += ["## References", ""]
        for ref in d["references"]:
            out.append(f"- {_reference_link(ref)}")
        out.append("")

    if related:
        out += ["## Related failures", ""]
        for link in related:
            label = RELATION_LABELS.get(link.relation, link.relation)
            title = titles.get(link.id, link.id)
            line = f"- {label}: [{_plain(title)}](../{link.id}/index.md)"
            if link.note:
                line += f": {_cell(link.note)}"
            elif link.reverse:
                line += " (linked from that entry)"
            out.append(line)
        out.append("")

    out += [
        "---",
        "",
        f"*Entry `{entry.id}` · created {_plain(d.get('created', '?'))} · "
        f"updated {_plain(d.get('updated', '?'))} · source `entries/{entry.id}.yaml`*",
        "",
    ]
    return "\n".join(out), figure_count


# --- tags, facets, messages ----------------------------------------------------------------------


# Front matter of generated lists that only repeat entry titles and quick answers: kept out of
# the search index, so a pasted message lands on the entry, not on a short list that names it.
_SEARCH_EXCLUDED = ("---", "search:", "  exclude: true", "---", "")


def paged_tags(entries: list[Entry]) -> set[str]:
    """The tags that get a page: those at least MIN_TAG_ENTRIES entries share."""
    counts: dict[str, int] = {}
    for entry in entries:
        for tag in set(map(str, entry.data.get("tags") or [])):
            counts[tag] = counts.get(tag, 0) + 1
    return {tag for tag, count in counts.items() if count >= MIN_TAG_ENTRIES}


def _tag_links(tags: Iterable[Any], paged: set[str] | None) -> str:
    """Tags as chips: a link where the tag has a page, plain text where it does not."""
    chips = []
    for tag in map(str, tags):
        if paged is None or tag in paged:
            chips.append(f"[#{tag}](../../tags/{tag}.md){{ .tw-tag }}")
        else:
            chips.append(f'<span class="tw-tag">#{_plain(tag)}</span>')
    return " ".join(chips)


def _facet_line(entry: Entry, vocabulary: dict[str, Facet]) -> str:
    """'Symptom: Hang · Component: NCCL ...', each value linked to its place on the triage page."""
    parts = []
    facets = entry_facets(entry.data, vocabulary)
    for name in FACETS:
        values = facets[name]
        if not values:
            continue
        facet = vocabulary[name]
        shown = []
        for value in values:
            label = _cell(facet.term(value).label)
            if name == "symptom":
                shown.append(f"[{label}](../../triage.md#symptom-{value})")
            else:
                shown.append(label)
        parts.append(f"**{facet.label}:** {', '.join(shown)}")
    return " · ".join(parts)


def _rule_messages(root: Path, rule: Rule) -> list[str]:
    """The lines a rule recognises: its documented examples when it has them, else the lines its
    regex matchers match in the regression logs it must match (tests.match)."""
    found: list[str] = []
    for example in rule.data.get("examples") or []:
        text = example
        if isinstance(example, dict):
            text = next(
                (example[k] for k in ("text", "line", "message") if isinstance(example.get(k), str)),
                None,
            )
        if isinstance(text, str) and text.strip():
            found.append(text)
    if not found:
        from trainwreck.rules import regexes

        # Only the matchers whose lines the rule reports as evidence, in the order it lists them
        # (the failure's own message first): the others describe context (a checkpoint save that
        # explains a slow step), not the failure.
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
        tests = rule.data.get("tests") if isinstance(rule.data.get("tests"), dict) else {}
        logs: list[list[str]] = []
        for name in tests.get("match") or []:
            path = root / str(name)
            if not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
                continue
            with open(path, "rb") as handle:
                logs.append(handle.read(MAX_MESSAGE_LOG_BYTES).decode("utf-8", "replace").splitlines())
        for pattern in patterns:
            for log in logs:
                found.extend(line for line in log if pattern.search(line))
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
        lines.append(line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 1] + "…")
        if len(lines) >= MAX_MESSAGES_PER_RULE:
            break
    return lines


def _messages_section(root: Path, rules: list[Rule]) -> list[str]:
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
        _fence("\n".join(lines), "text"),
    ]
    return ['??? quote "Messages this failure prints"', "", _indent("\n".join(body)), ""]


# --- the triage page ------------------------------------------------------------------------------


def _first_check(entry: Entry) -> str:
    """The first check of the entry's confirm section, with what confirms it."""
    items = [c for c in entry.data.get("confirm") or [] if isinstance(c, dict)]
    if not items:
        return ""
    first = items[0]
    text = _cell(first.get("check", ""))
    if first.get("expect"):
        text += f" Expect: {_cell(first['expect'])}"
    return text


def _candidate(
    entry: Entry,
    vocabulary: dict[str, Facet],
    links: list[RelatedLink],
    titles: dict[str, str],
) -> list[str]:
    """One candidate of the triage page: a list item with its facets in data attributes."""
    facets = entry_facets(entry.data, vocabulary)
    attributes = " ".join(
        f'data-{name}="{" ".join(facets[name])}"' for name in ("component", "framework", "scale")
    )
    marker = f'<span class="tw-candidate" {attributes}></span>'
    frameworks = [
        "any framework" if v == ANY_FRAMEWORK else vocabulary["framework"].term(v).label
        for v in facets["framework"]
    ]
    scales = [vocabulary["scale"].term(v).label for v in facets["scale"]]
    lines = [
        f"- {marker}**[{_cell(entry.title)}](entries/{entry.id}/index.md)**: "
        f"{_cell(_summary_line(entry))}",
        "",
        f"    - *Framework:* {', '.join(frameworks)} · *Scale:* {', '.join(scales)}",
    ]
    first = _first_check(entry)
    if first:
        lines.append(f"    - *First check:* {first}")
    for link in links:
        if link.relation == "confused-with" and link.id in titles:
            note = f": {_cell(link.note)}" if link.note else ""
            lines.append(
                f"    - *Not to be confused with* [{_cell(titles[link.id])}]"
                f"(entries/{link.id}/index.md){note}"
            )
    return [*lines, ""]


def _filter_bar(vocabulary: dict[str, Facet]) -> str:
    """The empty, hidden filter bar; triage.js fills it with the options carried here, so the
    labels come from the vocabulary in the schema, not from the script."""
    import html

    attributes = []
    for name in FACETS:
        options = [
            [term.value, term.label]
            for term in vocabulary[name].terms
            if not (name == "framework" and term.value == ANY_FRAMEWORK)
        ]
        attributes.append(
            f'data-{name}-label="{html.escape(vocabulary[name].label)}" '
            f'data-{name}-options="{html.escape(json.dumps(options))}"'
        )
    return f'<div class="tw-triage-filters" hidden {" ".join(attributes)}></div>'


def render_triage(
    entries: list[Entry], vocabulary: dict[str, Facet], links: dict[str, list[RelatedLink]]
) -> str:
    """'What are you seeing?': symptom, then component; the candidates with their quick answer
    and the first check that tells them apart. Plain nested lists without JavaScript; with it,
    docs/javascripts/triage.js adds filters by component, framework and scale."""
    titles = {e.id: e.title for e in entries}
    ordered = sorted(entries, key=lambda e: e.title.lower())
    symptom_facet, component_facet = vocabulary["symptom"], vocabulary["component"]
    out = [
        "---",
        "title: What are you seeing?",
        "description: Start from what the failing run shows and narrow down to the failure.",
        "---",
        "",
        "# What are you seeing?",
        "",
        "Pick what the run shows, then the part of the stack it points at. Each candidate has its "
        "quick answer and the first check that tells it apart from the others. Have an error "
        "line? Paste it into the search box: every failure page lists the messages it prints.",
        "",
        _filter_bar(vocabulary),
        "",
    ]
    present = [
        term for term in symptom_facet.terms
        if any(term.value in entry_facets(e.data)["symptom"] for e in ordered)
    ]
    out += [
        f"- [{_cell(term.label)}](#symptom-{term.value}): {_cell(term.description)}"
        for term in present
    ]
    out.append("")
    for term in present:
        out += [
            f'<div class="tw-triage-symptom" data-symptom="{term.value}" markdown>',
            "",
            f"## {term.label} {{ #symptom-{term.value} }}",
            "",
            f"*{_cell(term.description)}*",
            "",
        ]
        group = [e for e in ordered if term.value in entry_facets(e.data)["symptom"]]
        for component in component_facet.terms:
            members = [e for e in group if component.value in entry_facets(e.data)["component"]]
            if not members:
                continue
            out += [
                f'<div class="tw-triage-component" data-component="{component.value}" markdown>',
                "",
                f"### {term.label}: {component.label} {{ #{term.value}-{component.value} }}",
                "",
            ]
            for entry in members:
                out += _candidate(entry, vocabulary, links.get(entry.id, []), titles)
            out += ["</div>", ""]
        out += ["</div>", ""]
    return "\n".join(out)


def _reference_link(ref: Any) -> str:
    """A reference as an HTML link (never Markdown link syntax, which a ")" in the URL would
    end early); a URL that is not http(s) is shown as text, not linked."""
    if not isinstance(ref, dict):
        return _plain(ref)
    url = str(ref.get("url") or "")
    title = _plain(ref.get("title") or url)
    kind = f" ({_plain(ref.get('kind'))})" if ref.get("kind") else ""
    if url_problem(url) is not None:
        return f"{title} ({_code(url)}){kind}"
    return f'<a href="{escape_attribute(url)}">{title}</a>{kind}'


def _tags(entry: Entry) -> list[str]:
    """The entry's tags that can name a page (kebab-case; `check` reports the others)."""
    return [str(t) for t in entry.data.get("tags") or [] if SLUG_RE.fullmatch(str(t))]


# --- index pages -------------------------------------------------------------------------------


def _entry_row(entry: Entry, status: Status, prefix: str) -> str:
    d = entry.data
    return (
        f"| [{_plain(entry.title)}]({prefix}{entry.id}/index.md) | {_plain(d.get('severity', ''))} "
        f"| {status.label} | {_cell(_summary_line(entry))} |"
    )


def _severity_key(entry: Entry) -> tuple[int, str]:
    severity = str(entry.data.get("severity", ""))
    rank = SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)
    return rank, entry.title.lower()


def render_indexes(
    entries: list[Entry], statuses: dict[str, Status], rules: list[Rule]
) -> dict[str, str]:
    """Generated pages other than entry pages, keyed by their path in the docs dir."""
    pages: dict[str, str] = {}
    # Most severe first, then by title: the order a reader scanning for their failure wants.
    entries = sorted(entries, key=_severity_key)
    by_category: dict[str, list[Entry]] = {}
    for entry in entries:
        by_category.setdefault(str(entry.data.get("category", "other")), []).append(entry)
    ordered = [c for c in CATEGORY_ORDER if c in by_category] + sorted(
        c for c in by_category if c not in CATEGORY_ORDER
    )
    counts = {kind: 0 for kind in ("reproduced", "recorded")}
    for status in statuses.values():
        if status.kind in counts:
            counts[status.kind] += 1
    lines = [
        "# All failures",
        "",
        f"{len(entries)} failure{'s' if len(entries) != 1 else ''} in "
        f"{len(ordered)} categor{'y' if len(ordered) == 1 else 'ies'}; "
        f"{counts['reproduced']} reproduced by a notebook in this build, "
        f"{counts['recorded']} recorded on a GPU. "
        "See also the lists [by severity](../by-severity.md) and [by tag](../tags/index.md).",
        "",
    ]
    for category in ordered:
        lines += [
            f"## {_plain(category.capitalize())}",
            "",
            f"*{CATEGORY_TEXT.get(category, '')}*" if category in CATEGORY_TEXT else "",
            "",
            "| Failure | Severity | Reproduction | Quick answer |",
            "|---|---|---|---|",
        ]
        lines += [_entry_row(e, statuses[e.id], "") for e in by_category[category]]
        lines.append("")
    pages["entries/index.md"] = "\n".join(lines)

    lines = [*_SEARCH_EXCLUDED, "# Failures by severity", ""]
    for severity in SEVERITY_ORDER:
        group = [e for e in entries if e.data.get("severity") == severity]
        if not group:
            continue
        lines += [
            f"## {severity.capitalize()}",
            "",
            "| Failure | Severity | Reproduction | Quick answer |",
            "|---|---|---|---|",
            *[_entry_row(e, statuses[e.id], "entries/") for e in group],
            "",
        ]
    pages["by-severity.md"] = "\n".join(lines)

    tags: dict[str, list[Entry]] = {}
    for entry in entries:
        for tag in _tags(entry):
            tags.setdefault(tag, []).append(entry)
    lines = [
        "# Tags",
        "",
        f"Tags shared by at least {MIN_TAG_ENTRIES} failures. To narrow down by what you see, use "
        "[What are you seeing?](../triage.md).",
        "",
        "| Tag | Failures |",
        "|---|---|",
    ]
    for tag in sorted(tags):
        if len(tags[tag]) < MIN_TAG_ENTRIES:
            continue
        lines.append(f"| [{tag}]({tag}.md) | {len(tags[tag])} |")
        pages[f"tags/{tag}.md"] = "\n".join(
            [
                *_SEARCH_EXCLUDED,
                f"# Tag: {tag}",
                "",
                "| Failure | Severity | Reproduction | Quick answer |",
                "|---|---|---|---|",
                *[_entry_row(e, statuses[e.id], "../entries/") for e in tags[tag]],
                "",
                "[All tags](index.md)",
                "",
            ]
        )
    pages["tags/index.md"] = "\n".join([*lines, ""])

    titles = {e.id: e.title for e in entries}
    lines = [
        "# Detection rules",
        "",
        f"{len(rules)} rule{'s' if len(rules) != 1 else ''} that `trainwreck diagnose` runs over "
        "training logs. Each names the failure it diagnoses; the rule language is documented in "
        "[the rule language reference](rule-language.md).",
        "",
        "| Rule | Diagnoses | Confidence | What it sees |",
        "|---|---|---|---|",
    ]
    for rule in rules:
        entry_id = str(rule.data.get("entry", ""))
        target = (
            f"[{_plain(titles[entry_id])}](entries/{entry_id}/index.md)"
            if entry_id in titles
            else _code(entry_id)
        )
        confidence = rule.data.get("confidence")
        confidence_text = f"{confidence:.2f}" if isinstance(confidence, (int, float)) else ""
        name = (
            f"[`{rule.id}`](entries/{entry_id}/index.md#rule-{rule.id})"
            if entry_id in titles and SLUG_RE.fullmatch(rule.id)
            else _code(rule.id)
        )
        lines.append(
            f"| {name} | {target} | {confidence_text} | {_plain(rule.data.get('title', ''))} |"
        )
    lines.append("")
    pages["rules.md"] = "\n".join(lines)
    return pages


# --- assembling the docs dir -------------------------------------------------------------------------


@dataclass
class Pages:
    entries: int = 0
    indexes: int = 0
    figures: int = 0
    statuses: dict[str, Status] = field(default_factory=dict)
    nav: list[Any] = field(default_factory=list)
    html_pages: int = 0


def _manifest_records(manifest: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    for record in (manifest or {}).get("notebooks", []) or []:
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            records[record["id"]] = record
    return records


def generate_docs(
    root: Path,
    docs_out: Path,
    entries: list[Entry],
    manifest: dict[str, Any] | None,
    rules: list[Rule],
) -> Pages:
    """Copy docs/ into `docs_out` and write every generated page there."""
    for entry in entries:
        if entry.id in RESERVED_IDS:
            raise BuildError(
                f"entries/{entry.id}.yaml: the id '{entry.id}' is reserved by the site"
            )
        if not SLUG_RE.fullmatch(entry.id):
            raise BuildError(f"entries/{entry.id}.yaml: an entry id must be kebab-case")
    if docs_out.exists():
        shutil.rmtree(docs_out)
    source_docs = root / "docs"
    if source_docs.is_dir():
        shutil.copytree(source_docs, docs_out)
    else:
        docs_out.mkdir(parents=True)
    for name in OPTIONAL_PAGES:
        # Hand-written pages that link here must not break the strict build while the page is
        # being written; the stub says so plainly and stays out of the nav.
        if not (docs_out / name).exists():
            title = name.removesuffix(".md").replace("-", " ").capitalize()
            (docs_out / name).write_text(
                f"# {title}\n\nThis page has not been written yet.\n", encoding="utf-8"
            )

    records = _manifest_records(manifest)
    pages = Pages()
    links = related_links(entries)
    tag_pages = paged_tags(entries)
    vocabulary = load_vocabulary(root)
    titles = {e.id: e.title for e in entries}
    rules_by_entry: dict[str, list[Rule]] = {}
    for rule in rules:
        rules_by_entry.setdefault(str(rule.data.get("entry")), []).append(rule)
    site_pages = {p.relative_to(docs_out).as_posix() for p in docs_out.rglob("*.md")}
    site_pages |= {f"entries/{e.id}/index.md" for e in entries}
    site_pages |= {"entries/index.md", "by-severity.md", "tags/index.md", "rules.md"}
    site_pages |= {f"tags/{tag}.md" for e in entries for tag in _tags(e) if tag in tag_pages}
    broken: list[str] = []
    for entry in entries:
        named = (entry.data.get("fingerprint") or {}).get("rules") or []
        mine = rules_by_entry.get(entry.id, [])
        extra = [r for r in rules if r.id in named and r not in mine]
        rules_by_entry[entry.id] = [*mine, *extra]
        status = status_for(entry, records.get(entry.id), current_hashes(root, entry))
        pages.statuses[entry.id] = status
        page_dir = docs_out / "entries" / entry.id
        page_dir.mkdir(parents=True, exist_ok=True)
        token = _PAGE_LINKS.set(
            PageLinks(
                f"entries/{entry.id}/index.md", f"entries/{entry.id}.yaml", site_pages, broken
            )
        )
        try:
            text, figures = render_entry(
                root,
                entry,
                status=status,
                rules=rules_by_entry[entry.id],
                related=links[entry.id],
                titles=titles,
                page_dir=page_dir,
                tag_pages=tag_pages,
                vocabulary=vocabulary,
            )
        finally:
            _PAGE_LINKS.reset(token)
        (page_dir / "index.md").write_text(text, encoding="utf-8")
        pages.entries += 1
        pages.figures += figures
    if broken:
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        raise BuildError(f"{broken[0]}{more}")
    # Index rows quote each entry's first sentence away from its page, where its relative links
    # would point elsewhere: they are dropped there (their text stays).
    token = _PAGE_LINKS.set(_drop_page_links)
    try:
        indexes = render_indexes(entries, pages.statuses, rules)
        indexes["triage.md"] = render_triage(entries, vocabulary, links)
    finally:
        _PAGE_LINKS.reset(token)
    for path, text in indexes.items():
        target = docs_out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        pages.indexes += 1
    pages.nav = _entry_nav(entries)
    return pages


def _entry_nav(entries: list[Entry]) -> list[Any]:
    """The 'Failures' section: the index pages, then each category's entries."""
    section: list[Any] = [
        {"All failures": "entries/index.md"},
        {"By severity": "by-severity.md"},
        {"Tags": "tags/index.md"},
        {"Detection rules": "rules.md"},
    ]
    by_category: dict[str, list[Entry]] = {}
    for entry in sorted(entries, key=lambda e: e.title.lower()):
        by_category.setdefault(str(entry.data.get("category", "other")), []).append(entry)
    ordered = [c for c in CATEGORY_ORDER if c in by_category] + sorted(
        c for c in by_category if c not in CATEGORY_ORDER
    )
    for category in ordered:
        section.append(
            {
                html.escape(category.capitalize(), quote=False): [
                    # mkdocs-material prints nav titles as HTML: escape them.
                    {html.escape(e.title, quote=False): f"entries/{e.id}/index.md"}
                    for e in by_category[category]
                ]
            }
        )
    return section


def _nav_file(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and len(item) == 1:
        value = next(iter(item.values()))
        return value if isinstance(value, str) else None
    return None


def compose_nav(
    base: list[Any] | None, failures: list[Any], docs_dir: Path, *, top: bool = True
) -> list[Any]:
    """mkdocs.yml's nav with its 'entries/index.md' item expanded into the Failures section,
    and hand-written pages that are not there (yet) left out."""
    nav: list[Any] = []
    placed = False
    for item in base or [{"Home": "index.md"}]:
        target = _nav_file(item)
        if target == "entries/index.md":
            title = next(iter(item)) if isinstance(item, dict) else "Failures"
            nav.append({title: failures})
            placed = True
            continue
        if (
            isinstance(item, dict)
            and len(item) == 1
            and isinstance(next(iter(item.values())), list)
        ):
            title, children = next(iter(item.items()))
            kept = compose_nav(children, failures, docs_dir, top=False) if children else []
            if kept:
                nav.append({title: kept})
            continue
        if target and "://" not in target:
            generated_stub = target in OPTIONAL_PAGES and not _has_real_page(docs_dir, target)
            if not (docs_dir / target).exists() or generated_stub:
                continue
        nav.append(item)
    if top and not placed and failures:
        nav.insert(min(1, len(nav)), {"Failures": failures})
    return nav


def _has_real_page(docs_dir: Path, name: str) -> bool:
    path = docs_dir / name
    return path.exists() and "This page has not been written yet." not in path.read_text(
        encoding="utf-8"
    )


# --- mkdocs -------------------------------------------------------------------------------------


class _Collect(logging.Handler):
    """Collects mkdocs' warnings and errors (strict: any of them fails the build)."""

    def __init__(self, echo: Progress | None) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())
        self.messages.append(f"{record.levelname.lower()}: {message}")
        if self.echo:
            self.echo(f"mkdocs {record.levelname.lower()}: {message}")


def run_mkdocs(root: Path, docs_dir: Path, site_dir: Path, failures_nav: list[Any]) -> int:
    """`mkdocs build --strict` of `docs_dir` with mkdocs.yml's settings; returns HTML pages."""
    try:
        from mkdocs import exceptions as mkdocs_exceptions
        from mkdocs.commands.build import build as mkdocs_build
        from mkdocs.config import load_config
    except ImportError:
        raise BuildError(
            "the site needs mkdocs and mkdocs-material: pip install 'trainwreck[site]'"
        ) from None
    config_file = root / "mkdocs.yml"
    if not config_file.is_file():
        raise BuildError(f"{config_file}: no mkdocs.yml")
    collector = _Collect(echo=lambda line: print(f"  {line}", file=sys.stderr))
    logger = logging.getLogger("mkdocs")
    logger.addHandler(collector)
    previous_level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        base = load_config(str(config_file), docs_dir=str(docs_dir), site_dir=str(site_dir))
        nav = compose_nav(base.get("nav"), failures_nav, docs_dir)
        config = load_config(
            str(config_file),
            docs_dir=str(docs_dir),
            site_dir=str(site_dir),
            strict=True,
            nav=nav,
        )
        if collector.messages:
            raise BuildError(f"mkdocs.yml: {collector.messages[0]}")
        mkdocs_build(config)
    except mkdocs_exceptions.ConfigurationError as exc:
        raise BuildError(f"mkdocs.yml: {' '.join(str(exc).split())}") from None
    except mkdocs_exceptions.MkDocsException as exc:
        first = collector.messages[0] if collector.messages else str(exc)
        more = len(collector.messages) - 1
        suffix = f" (and {more} more above)" if more > 0 else ""
        raise BuildError(f"mkdocs build --strict failed: {first}{suffix}") from None
    except OSError as exc:
        raise BuildError(f"mkdocs build failed: {exc}") from None
    finally:
        logger.removeHandler(collector)
        logger.setLevel(previous_level)
    return sum(1 for _ in site_dir.rglob("*.html"))


# --- the build ------------------------------------------------------------------------------------


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


def _count_notebooks(manifest: dict[str, Any] | None, ran: bool) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in _manifest_records(manifest).values():
        status = record.get("status")
        if status == "passed":
            key = "cached" if record.get("cached") or not ran else "executed"
        elif status == "skipped-needs-gpu":
            key = "skipped"
        else:
            key = str(status)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _stage_check(root: Path) -> tuple[list[Entry], list[Problem]]:
    from trainwreck.check import check_entries
    from trainwreck.model import entry_files

    problems, _checked = check_entries(root, entry_files(root))
    entries, _ = load_entries(root)
    return entries, problems


def _stage_compile(root: Path) -> int:
    """`trainwreck compile` as the command runs it (validate, run every rule's regression logs,
    write build/rules/bundle.json and the rule wheel into dist/); returns the rule count."""
    if not any((root / "rules").glob("*.yaml")):
        return 0  # nothing to compile yet (a new knowledge base); the pages say "no rule yet"
    try:
        from trainwreck.rules import compile as rules_compile
    except ImportError as exc:
        raise BuildError(f"the rule compiler is not available ({exc})") from None
    parser = argparse.ArgumentParser(prog="trainwreck compile")
    parser.add_argument("--root", default=".")
    rules_compile.configure_parser(parser)
    args = parser.parse_args(["--root", str(root)])
    # Its problems and its one-line result go to the terminal as they do for `trainwreck compile`.
    code = rules_compile.run(args)
    if code != 0:
        raise BuildError("compile: the rules have errors (listed above); fix them and build again")
    try:
        bundle = json.loads((root / args.bundle).read_text(encoding="utf-8"))
        return len(bundle.get("rules") or [])
    except (OSError, ValueError, AttributeError):
        return len(load_rules(root))


# --- skipping unchanged stages (see trainwreck.stamps) ----------------------------------------


def _stage_check_cached(root: Path) -> tuple[list[Entry] | None, list[Problem], int]:
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
    entries, problems = _stage_check(root)
    if not any(p.severity == "error" for p in problems):
        stamps.save(
            root,
            "check",
            key,
            {"problems": [p.to_json() for p in problems], "entries": len(entries)},
        )
    return entries, problems, len(entries)


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

    walk(_manifest_records(manifest))
    return sorted(found)


def _pages_key(root: Path, docs_out: Path, manifest: dict[str, Any] | None) -> str:
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
        .text(str(root), str(docs_out), manifest, _library_versions("nh3", "markdown"))
    )
    for path in _manifest_files(root, manifest):
        key.file(path)
    return key.hexdigest()


def _cached_pages(root: Path, key: str, docs_out: Path) -> Pages | None:
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


def _save_pages(root: Path, key: str, docs_out: Path, pages: Pages) -> None:
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


def _library_versions(*names: str) -> dict[str, str]:
    """Installed versions of the libraries that render pages (a new one may render differently)."""
    from importlib import metadata

    versions: dict[str, str] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _site_key(root: Path, docs_out: Path, site: Path, nav: list[Any]) -> str:
    """What mkdocs reads: the generated pages, mkdocs.yml, the theme (by version) and the nav."""
    return (
        stamps.Key("site")
        .code()
        .tree(docs_out)
        .file(root / "mkdocs.yml")
        .environment(root / "mkdocs.yml")
        .text(
            _library_versions("mkdocs", "mkdocs-material", "markdown", "pymdown-extensions"),
            nav,
            str(site),
        )
        .hexdigest()
    )


def _cached_site(root: Path, key: str, site: Path) -> int | None:
    """HTML page count of an intact site built from the same inputs, else None."""
    stamp = stamps.load(root, "site", key)
    if stamp is None or not (site / "index.html").is_file():
        return None
    if not stamps.unchanged(stamp.get("outputs")):
        return None
    pages = stamp.get("pages")
    return pages if isinstance(pages, int) else None


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
    say = progress or (lambda _line: None)
    summary = Summary()
    mark = [started]

    def lap() -> str:
        now = time.monotonic()
        seconds, mark[0] = now - mark[0], now
        return f"{seconds:.1f} s"

    if not (root / "entries").is_dir():
        raise BuildError(f"{root}: no entries/ folder; run from the repository root or pass --root")

    say("[1/5] check: validating entries")
    entries, problems, entry_count = _stage_check_cached(root)
    errors = [p for p in problems if p.severity == "error"]
    warnings = [p for p in problems if p.severity != "error"]
    for problem in problems:
        say(f"  {problem}")
    if errors:
        raise BuildError(f"check: {len(errors)} error(s) in entries/; fix them and build again")
    if strict and warnings:
        raise BuildError(f"check: {len(warnings)} warning(s) and --strict is set")
    summary.entries = entry_count
    summary.warnings += [str(p) for p in warnings]
    say(
        f"  {entry_count} entries valid"
        + (f", {len(warnings)} warning(s)" if warnings else "")
        + f" ({lap()})"
    )

    manifest: dict[str, Any] | None = None
    manifest_path = root / "build" / "manifest.json"
    if reproduce:
        say(f"[2/5] reproduce: running notebooks (cached, -j {jobs})")
        try:
            from trainwreck.reproduce import ReproduceError
            from trainwreck.reproduce import reproduce as run_reproduce
        except ImportError as exc:
            raise BuildError(f"reproduce is not available ({exc})") from None
        try:
            manifest = run_reproduce(root, None, jobs=jobs, progress=lambda s: say(f"  {s}"))
        except ReproduceError as exc:
            raise BuildError(f"reproduce: {exc}") from None
        except ImportError as exc:
            raise BuildError(
                f"reproduce needs the repro extra ({exc.name} is missing): "
                "pip install 'trainwreck[repro]', or build with --no-reproduce"
            ) from None
    else:
        say("[2/5] reproduce: skipped (--no-reproduce); using the last manifest")
        if manifest_path.is_file():
            try:
                manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise BuildError(f"build/manifest.json: not valid JSON ({exc})") from None
        else:
            say("  no build/manifest.json: pages will say the notebooks have not run")
    summary.notebooks = _count_notebooks(manifest, ran=reproduce)
    if reproduce:
        say(f"  notebooks done ({lap()})")
    for record in _manifest_records(manifest).values():
        if record.get("status") == "failed":
            error = record.get("error") or {}
            summary.failed.append(
                f"{record.get('notebook')}: cell {error.get('cell')}: "
                f"{_first_sentence(str(error.get('message', '')), 200)}"
            )
    for line in summary.failed:
        say(f"  FAILED {line}")
    if strict and summary.failed:
        raise BuildError(f"reproduce: {len(summary.failed)} notebook(s) failed and --strict is set")

    say("[3/5] compile: validating and compiling rules")
    summary.rules = _stage_compile(root)
    say(f"  {summary.rules} rules compiled ({lap()})")

    say("[4/5] pages: generating entry, index and tag pages")
    docs_out = Path(docs_dir).resolve() if docs_dir else root / "build" / "docs"
    pages_key = _pages_key(root, docs_out, manifest)
    pages = _cached_pages(root, pages_key, docs_out)
    if pages is None:
        if entries is None:
            entries, _ = load_entries(root)
        try:
            pages = generate_docs(root, docs_out, entries, manifest, load_rules(root))
        except SanitizerMissing as exc:
            raise BuildError(str(exc)) from None
        _save_pages(root, pages_key, docs_out, pages)
        unchanged = ""
    else:
        unchanged = "; unchanged, not regenerated"
    summary.figures = pages.figures
    say(
        f"  {pages.entries} entry pages, {pages.indexes} index and tag pages, {pages.figures} figures"
        f" ({lap()}{unchanged})"
    )

    site = Path(site_dir).resolve() if site_dir else root / "site"
    say(f"[5/5] site: mkdocs build --strict into {_rel(site, root)}/")
    site_key = _site_key(root, docs_out, site, pages.nav)
    cached_pages = _cached_site(root, site_key, site)
    if cached_pages is None:
        stamps.forget(root, "site")
        summary.pages = run_mkdocs(root, docs_out, site, pages.nav)
        stamps.save(
            root, "site", site_key, {"pages": summary.pages, "outputs": stamps.digests([site])}
        )
        say(f"  {summary.pages} HTML pages ({lap()})")
    else:
        summary.pages = cached_pages
        say(f"  {summary.pages} HTML pages ({lap()}; pages, theme and mkdocs.yml unchanged)")
    summary.seconds = time.monotonic() - started
    return summary


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# --- command line ------------------------------------------------------------------------------


def configure_build_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-reproduce",
        action="store_true",
        help="do not run notebooks; use build/manifest.json as it is",
    )
    parser.add_argument(
        "-j", "--jobs", type=int, default=1, help="notebooks to run in parallel (default 1)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also fail on check warnings and failed notebooks (the site build is always strict)",
    )
    parser.add_argument("--site-dir", default=None, help="output folder (default: site/)")


def run_build(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        summary = build(
            args.root,
            reproduce=not args.no_reproduce,
            jobs=max(1, args.jobs),
            strict=args.strict,
            site_dir=args.site_dir,
            progress=say,
        )
    except BuildError as exc:
        print(f"trainwreck build: {exc}", file=sys.stderr)
        return 1
    except (OSError, UnicodeError) as exc:
        # A file that cannot be read or written (permissions, disk full): one line, no traceback.
        print(f"trainwreck build: {exc}", file=sys.stderr)
        return 1
    print("built site/" if not args.site_dir else f"built {args.site_dir}")
    for line in summary.lines():
        print(f"  {line}")
    if summary.failed:
        print(
            f"trainwreck build: {len(summary.failed)} notebook(s) failed; their pages say so",
            file=sys.stderr,
        )
        return 1
    return 0


def configure_serve_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--site-dir", default=None, help="folder to serve (default: site/)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("TRAINWRECK_SERVE_LOG"):
            super().log_message(format, *args)


def make_server(site: Path, host: str = "127.0.0.1", port: int = 0) -> socketserver.TCPServer:
    """An HTTP server over `site` (port 0 picks a free port: server.server_address[1])."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    return http.server.ThreadingHTTPServer((host, port), handler)


def run_serve(args: argparse.Namespace) -> int:
    root = Path(args.root)
    site = Path(args.site_dir) if args.site_dir else root / "site"
    if not (site / "index.html").is_file():
        print(
            f"trainwreck serve: {site}/index.html does not exist; run `trainwreck build` first",
            file=sys.stderr,
        )
        return 2
    try:
        server = make_server(site, args.host, args.port)
    except OSError as exc:
        print(
            f"trainwreck serve: cannot listen on {args.host}:{args.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 2
    host, port = server.server_address[:2]
    print(f"serving {site}/ at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
