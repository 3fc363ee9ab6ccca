"""The Reproduction section of an entry page: status, how to run it, the executed notebook
and the evidence the run wrote."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

from trainwreck.model import Entry
from trainwreck.reproduce.records import EvidenceFiles
from trainwreck.site.notebook import is_image, render_notebook, svg_figure
from trainwreck.site.status import REPLAYS, PageStatus, ReproductionStatus
from trainwreck.site.text import ANSI_RE, clip, code_span, fenced, inline_md, plain, prose

# A training log can be large; the page shows an excerpt of its start.
LOG_EXCERPT_BYTES = 64 * 1024


def render_reproduction(
    root: Path,
    entry: Entry,
    status: PageStatus,
    page_dir: Path,
    parts: list[ReproductionStatus] | None = None,
) -> tuple[str, int]:
    """The reproduction section and the number of figures written next to the page: the one
    reproduction's status and notebook, or, for several, a part of its own for each."""
    lines = ["## Reproduction", ""]
    # The sentence quotes contributed text (a reason, a notebook's error message).
    lines += [f'!!! {status.admonition} "Status"', "", f"    {inline_md(status.sentence)}", ""]
    if parts is not None and len(parts) > 1:
        figures = 0
        lines += [
            f"This failure has {len(parts)} reproductions, each with its own run and status.",
            "",
        ]
        for part in parts:
            text, count = _render_part(root, part, page_dir)
            lines += [text, ""]
            figures += count
        return "\n".join(lines), figures
    reproduction = entry.reproductions[0] if entry.reproductions else None
    if reproduction is None or not reproduction.notebook:
        return "\n".join(lines), 0
    if reproduction.note:
        lines += [prose(reproduction.note), ""]
    lines += _how_to_run(entry.id, reproduction.notebook)
    body, figures = _notebook_and_evidence(
        root, entry.id, reproduction.notebook, status, page_dir, "###", "figure"
    )
    return "\n".join(lines + body), figures


def _render_part(root: Path, part: ReproductionStatus, page_dir: Path) -> tuple[str, int]:
    """One of several reproductions: its own status, note, command, notebook and evidence."""
    reproduction, status = part.reproduction, part.status
    lines = [f"### {plain(part.title)}", ""]
    lines += [f'!!! {status.admonition} "Status"', "", f"    {inline_md(status.sentence)}", ""]
    if reproduction.replay:
        what = REPLAYS.get(reproduction.replay, reproduction.replay)
        lines += [
            f"This notebook is a replay of {what} through trainwreck.memory's model, on the "
            "CPU (see [Replay a memory snapshot](../../memory-replay.md)). It is not a GPU "
            "run: what it shows is what the modelled rules do with the workload; a GPU "
            "notebook's run is the proof that a GPU does the same.",
            "",
        ]
    if reproduction.note:
        lines += [prose(reproduction.note), ""]
    notebook = reproduction.notebook
    if not notebook:
        return "\n".join(lines), 0
    lines += _how_to_run(reproduction.id, notebook)
    # Figures of each reproduction get their own names next to the one page.
    body, figures = _notebook_and_evidence(
        root, reproduction.id, notebook, status, page_dir, "####", f"figure-{reproduction.id}"
    )
    return "\n".join(lines + body), figures


def _notebook_and_evidence(
    root: Path,
    run_id: str,
    notebook_path: str,
    status: PageStatus,
    page_dir: Path,
    heading: str,
    prefix: str,
) -> tuple[list[str], int]:
    lines: list[str] = []
    record = status.record
    executed = _read_json(root, record.executed) if status.show_outputs and record else None
    shown_outputs = executed is not None
    source = executed if executed is not None else _read_json(root, notebook_path)
    if source is None:
        return [f"The notebook {code_span(notebook_path)} could not be read.", ""], 0
    # Notebook headings go under the notebook's own heading: '# A' one level below it.
    rendered = render_notebook(
        source, page_dir, prefix=prefix, show_outputs=shown_outputs, demote=len(heading) - 1
    )
    figures = list(rendered.figures)
    lines += _notebook_heading(run_id, status, shown_outputs, heading)
    lines += [rendered.markdown, ""]
    if shown_outputs and record is not None:
        lines += _evidence_section(root, record.evidence, page_dir, figures, heading, prefix)
    return lines, len(figures)


def _how_to_run(entry_id: str, notebook_path: str) -> list[str]:
    return [
        "Run it yourself from a clone of the repository:",
        "",
        fenced(
            "pip install -e '.[repro]'\n"
            f"trainwreck reproduce {entry_id}\n"
            f"jupyter lab {notebook_path}",
            "bash",
        ),
        "",
    ]


def _read_json(root: Path, path: str | None) -> Any:
    """The notebook at `path` (relative to the root), or None when absent or unreadable."""
    if not path:
        return None
    with contextlib.suppress(OSError, ValueError):
        return json.loads((root / path).read_text(encoding="utf-8"))
    return None


def _notebook_heading(
    entry_id: str, status: PageStatus, shown_outputs: bool, heading: str = "###"
) -> list[str]:
    """What the reader is looking at: the run itself, or the source and why without outputs."""
    if shown_outputs:
        return [
            f"{heading} The executed notebook",
            "",
            "Below is the notebook as it ran for the status above: its code, its printed "
            "output and its figures.",
            "",
        ]
    if status.show_outputs:  # a run of this source, but its executed copy is gone
        executed = status.record.executed if status.record else None
        return [
            f"{heading} The notebook",
            "",
            f"The executed copy ({code_span(executed)}) is missing from this build, so the "
            f"source is shown without outputs; `trainwreck reproduce {entry_id}` restores it.",
            "",
        ]
    return [
        f"{heading} The notebook",
        "",
        "The notebook's source is shown without outputs: there is no run of this exact "
        "source to show.",
        "",
    ]


def _evidence_section(
    root: Path,
    evidence: EvidenceFiles,
    page_dir: Path,
    figures: list[str],
    heading: str = "###",
    prefix: str = "figure",
) -> list[str]:
    lines = _measured_fingerprint(root, evidence.metrics, heading)
    lines += _log_excerpts(root, evidence, heading)
    if not figures:
        # Named after the notebook's figures: "evidence-N" for the one reproduction.
        name = "evidence" if prefix == "figure" else f"evidence{prefix.removeprefix('figure')}"
        lines += _evidence_figures(root, evidence.figures, page_dir, figures, name)
    return lines


def _measured_fingerprint(root: Path, metrics: str | None, heading: str = "###") -> list[str]:
    if not metrics:
        return []
    with contextlib.suppress(OSError, ValueError):
        values = json.loads((root / metrics).read_text(encoding="utf-8"))
        return [
            f"{heading} Measured fingerprint",
            "",
            f"The run wrote these numbers to `{metrics}`:",
            "",
            fenced(clip(json.dumps(values, indent=2), 80), "json"),
            "",
        ]
    return []


def _log_excerpts(root: Path, evidence: EvidenceFiles, heading: str = "###") -> list[str]:
    if not (evidence.broken or evidence.fixed):
        return []
    lines = [
        f"{heading} Training logs written by the run",
        "",
        "The broken and fixed runs' logs are regression tests of the detection rules: "
        "the rules must diagnose the broken log as this failure and the fixed log as clean.",
        "",
    ]
    for side, logs in (("broken", evidence.broken), ("fixed", evidence.fixed)):
        for log in logs[:1]:
            with contextlib.suppress(OSError), open(root / log, "rb") as handle:
                head = handle.read(LOG_EXCERPT_BYTES).decode("utf-8", errors="replace")
                text = head.rsplit("\n", 1)[0] if len(head) == LOG_EXCERPT_BYTES else head
                lines += [
                    f"Excerpt of `{log}` ({side} run):",
                    "",
                    fenced(clip(ANSI_RE.sub("", text), 12), "text"),
                    "",
                ]
    return lines


def _evidence_figures(
    root: Path, paths: tuple[str, ...], page_dir: Path, figures: list[str], name: str = "evidence"
) -> list[str]:
    """The figures the run wrote (when the notebook showed none itself)."""
    lines: list[str] = []
    for figure_path in paths:
        source = root / str(figure_path)
        if not source.is_file():
            continue
        suffix = source.suffix.lower()
        with contextlib.suppress(OSError):
            if suffix == ".svg":
                svg = source.read_text(encoding="utf-8", errors="replace")
                figures.append(f"{name}-{len(figures) + 1}.svg (inline)")
                lines += [svg_figure(svg, f"Figure {len(figures)} written by the run"), ""]
            elif is_image(source.read_bytes()[:16], suffix):
                # Only raster images are copied next to the page: an .html or .svg file
                # there would be a document of the site's origin.
                copied = f"{name}-{len(figures) + 1}{suffix}"
                shutil.copyfile(source, page_dir / copied)
                figures.append(copied)
                lines += [f"![Figure {len(figures)} written by the run]({copied})", ""]
    return lines
