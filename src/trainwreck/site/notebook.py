"""A notebook as page Markdown: its prose, its code and, for a run of the current source, its
outputs and figures."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck.sanitize import escape_attribute
from trainwreck.site.text import ANSI_RE, clip, fenced, inline_md, prose

# Code cells longer than this fold away on the page.
LONG_CELL_LINES = 30
# Figures are written next to the page only as raster images whose bytes say so.
RASTER_MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".jpg": b"\xff\xd8\xff", ".jpeg": b"\xff\xd8\xff",
                ".gif": b"GIF8"}  # fmt: skip


@dataclass
class RenderedNotebook:
    markdown: str
    # file names written next to the page; an SVG figure is embedded in the page instead and
    # listed as "<name>.svg (inline)"
    figures: list[str] = field(default_factory=list)


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _fence_after(line: str, fence: str | None) -> str | None:
    """The code fence open after `line` (its character, ` or ~), given the one open before it:
    headings inside a fenced block are code, not headings."""
    marker = re.match(r"(`{3,}|~{3,})", line.lstrip())
    if marker:
        if fence is None:
            return marker.group(1)[0]
        if line.lstrip().startswith(fence):
            return None
    return fence


def _demote_headings(markdown: str, levels: int = 2) -> str:
    """Notebook headings sit under the page's Reproduction section: '# A' becomes '### A'."""
    out = []
    fence: str | None = None
    for line in markdown.split("\n"):
        fence = _fence_after(line, fence)
        if fence is None and re.match(r"#{1,6}\s", line):
            hashes = len(line) - len(line.lstrip("#"))
            line = "#" * min(6, hashes + levels) + line[hashes:]
        out.append(line)
    return "\n".join(out)


def _notebook_markdown(markdown: str, demote: int = 2) -> str:
    """A markdown cell for the page: its headings (demoted) stay page headings, so they reach
    the table of contents; everything else is sanitised as contributed prose."""
    parts: list[str] = []
    chunk: list[str] = []
    fence: str | None = None

    def flush() -> None:
        text = "\n".join(chunk).strip()
        if text:
            parts.append(prose(text))
        chunk.clear()

    for line in _demote_headings(markdown, demote).split("\n"):
        fence = _fence_after(line, fence)
        heading = re.match(r"(#{1,6})\s+(.*?)(\s+#+)?\s*$", line) if fence is None else None
        if heading:
            flush()
            parts.append(f"{heading.group(1)} {inline_md(heading.group(2))}")
        else:
            chunk.append(line)
    flush()
    return "\n\n".join(parts)


def is_image(data: bytes, suffix: str) -> bool:
    magic = RASTER_MAGIC.get(suffix.lower())
    return magic is not None and data.startswith(magic)


def svg_figure(svg: str, alt: str) -> str:
    """An SVG figure as an <img> with a data: URL: a browser runs no script and loads nothing
    from an SVG shown as an image, and no contributed SVG becomes a file of the site's origin
    (where opening it directly would run its scripts)."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{escape_attribute(alt)}" src="data:image/svg+xml;base64,{encoded}">'


def _text(data: Any) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


def _decode(data: Any) -> bytes:
    try:
        return base64.b64decode(_text(data))
    except ValueError:
        return b""


def render_notebook(
    notebook: dict[str, Any],
    out_dir: Path,
    *,
    prefix: str,
    show_outputs: bool,
    demote: int = 2,
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
                        if not is_image(data, f".{ext}"):
                            break  # not the image it claims to be: left out
                        figure = f"{prefix}-attachment-{len(figures) + 1}.{ext}"
                        (out_dir / figure).write_bytes(data)
                        figures.append(figure)
                        text = text.replace(f"attachment:{name}", figure)
                        break
            parts.append(_notebook_markdown(text.strip(), demote))
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
                + fenced(source, "python", indent="    ")
            )
        else:
            parts.append(fenced(source, "python"))
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
            text = clip(ANSI_RE.sub("", "".join(stream)))
            if text.strip():
                parts.append(fenced(text, "text"))
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
            if is_image(png, ".png"):
                figure = f"{prefix}-{len(figures) + 1}.png"
                (out_dir / figure).write_bytes(png)
                figures.append(figure)
                parts.append(f"![Figure {len(figures)} of the executed reproduction]({figure})")
            elif "image/svg+xml" in data:
                figures.append(f"{prefix}-{len(figures) + 1}.svg (inline)")
                parts.append(
                    svg_figure(
                        _text(data["image/svg+xml"]),
                        f"Figure {len(figures)} of the executed reproduction",
                    )
                )
            elif "text/plain" in data:
                # text/html and other rich outputs are never published; their plain text is.
                text = clip(ANSI_RE.sub("", _text(data["text/plain"])))
                # matplotlib's "<Figure size 640x480 with 1 Axes>" repr says nothing to a reader.
                if text.strip() and not re.fullmatch(r"<Figure size .*>", text.strip()):
                    parts.append(fenced(text, "text"))
        elif output_type == "error":
            trace = "\n".join(output.get("traceback") or []) or (
                f"{output.get('ename')}: {output.get('evalue')}"
            )
            parts.append(fenced(clip(ANSI_RE.sub("", trace)), "text"))
    flush_stream()
    return parts
