"""An entry's sections as Markdown for an assistant (`get_entry`, `trainwreck://entries/{id}`).

Entry prose is Markdown that `trainwreck check` has vetted (no raw HTML, no script links); it is
passed through with control characters removed. Values that are not prose (ids, URLs, code) are
fenced or shown as code spans."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(value: Any) -> str:
    return _CONTROL.sub("", str(value if value is not None else "")).strip()


def _fence(code: str, language: str = "") -> list[str]:
    fence = "```"
    while fence in code:
        fence += "`"
    return [f"{fence}{language}", code.rstrip("\n"), fence]


def _steps(steps: Any) -> list[str]:
    out: list[str] = []
    for number, step in enumerate(steps or [], 1):
        if isinstance(step, Mapping):
            text = clean(step.get("text") or step.get("check") or step.get("title") or "")
            out.append(f"{number}. {text}")
            if step.get("code"):
                out += ["", *_fence(str(step["code"]), str(step.get("language") or "")), ""]
        else:
            out.append(f"{number}. {clean(step)}")
    return out


def entry_markdown(data: Mapping[str, Any], url: str = "") -> str:
    """The entry's sections, in reading order; a section the entry lacks is left out."""
    out = [f"# {clean(data.get('title') or data.get('id'))}", ""]
    line = f"`{clean(data.get('id'))}` · severity {clean(data.get('severity') or 'unknown')}"
    out.append(line + (f" · <{clean(url)}>" if url else ""))
    out += ["", "## Quick answer", "", clean(data.get("quick_answer")), ""]
    if data.get("summary"):
        out += ["## Summary", "", clean(data["summary"]), ""]
    if data.get("mechanism"):
        out += ["## How it happens", "", clean(data["mechanism"]), ""]
    if data.get("symptoms"):
        out += ["## Symptoms", ""]
        for symptom in data["symptoms"]:
            if isinstance(symptom, Mapping):
                why = clean(symptom.get("why"))
                out.append(
                    f"- {clean(symptom.get('observed'))}" + (f" (why: {why})" if why else "")
                )
        out.append("")
    if data.get("confirm"):
        out += ["## Confirm", "", *_steps(data["confirm"]), ""]
    fix = data.get("fix") or {}
    if isinstance(fix, Mapping):
        for tier in ("primary", "fallback", "emergency"):
            block = fix.get(tier)
            if isinstance(block, Mapping):
                out += [f"## Fix ({tier}): {clean(block.get('title'))}", ""]
                if block.get("when"):
                    out += [f"When: {clean(block['when'])}", ""]
                out += [*_steps(block.get("steps")), ""]
                if block.get("cost"):
                    out += [f"Cost: {clean(block['cost'])}", ""]
        if fix.get("verify"):
            out += ["## Verify the fix", "", *_steps(fix["verify"]), ""]
    if data.get("prevention"):
        out += ["## Prevention", "", *(f"- {clean(p)}" for p in data["prevention"]), ""]
    if data.get("related"):
        out += ["## Related", ""]
        for item in data["related"]:
            if isinstance(item, Mapping):
                note = clean(item.get("note"))
                out.append(
                    f"- `{clean(item.get('id'))}` ({clean(item.get('relation'))})"
                    + (f": {note}" if note else "")
                )
        out.append("")
    if data.get("references"):
        out += ["## References", ""]
        for ref in data["references"]:
            if isinstance(ref, Mapping):
                out.append(f"- {clean(ref.get('title'))}: <{clean(ref.get('url'))}>")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """An entry known only by its bundle summary (an installed rule pack, no checkout)."""
    data = {
        "id": summary.get("id"),
        "title": summary.get("title"),
        "severity": summary.get("severity"),
        "quick_answer": summary.get("quick_answer"),
        "summary": summary.get("summary"),
        "symptoms": [{"observed": s} for s in summary.get("symptoms") or []],
        "fix": {
            "primary": {
                "title": (summary.get("fix") or {}).get("title"),
                "steps": (summary.get("fix") or {}).get("steps"),
            },
            "verify": summary.get("verify"),
        },
    }
    return entry_markdown(data, str(summary.get("url") or ""))
