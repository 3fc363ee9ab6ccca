"""A detection rule as a section of its entry's page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwreck.model import DocumentError, load_yaml
from trainwreck.site.text import SLUG_RE, code_span, fenced, inline_md, plain, prose

if TYPE_CHECKING:
    from trainwreck.knowledge import KnowledgeBase


@dataclass
class Rule:
    """A rule as its file says it: the page quotes the rule as written (compile validates it)."""

    id: str
    file: str
    data: dict[str, Any]
    text: str


def rules_from_knowledge(kb: KnowledgeBase) -> list[Rule]:
    """The rules the knowledge base validated for compile (build compiles first), in file order,
    each with its file's text for the page: no rule file is parsed again for the site."""
    rules = []
    for rule in kb.rules.rules:
        document = kb.rules.documents.get(rule["id"])
        if document is not None:
            text = (kb.root / document.file).read_text(encoding="utf-8")
            rules.append(Rule(rule["id"], document.file, document.data, text))
    return sorted(rules, key=lambda rule: rule.file)


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
        return f"regular expression {code_span(spec['regex'])}"
    if "json" in spec:
        fields = ", ".join(f"{k} = {v}" for k, v in (spec.get("json") or {}).items())
        return f"JSON lines where {plain(fields)}" if fields else "JSON lines"
    if "block" in spec:
        block = spec.get("block") or {}
        return (
            f"a block of lines from {code_span(block.get('start', ''))} "
            f"to {code_span(block.get('end', ''))}"
        )
    if "traceback" in spec and isinstance(spec["traceback"], dict):
        found = spec["traceback"]
        frames = ", ".join(code_span(str(f)) for f in found.get("frames") or [])
        text = f"a traceback through the frames {frames}"
        if found.get("exception"):
            text += " ending in " + " or ".join(code_span(str(e)) for e in found["exception"])
        if found.get("message"):
            text += f" with a message matching {code_span(str(found['message']))}"
        return text + " (or cut before its exception line: lower confidence)"
    return plain(", ".join(sorted(spec)))


def _describe_detector(spec: Any) -> str:
    if not isinstance(spec, dict) or not spec:
        return "detector"
    kind, options = next(iter(spec.items()))
    if isinstance(options, dict):
        settings = ", ".join(f"{k}: {v}" for k, v in options.items())
        return f"{code_span(kind)} ({plain(settings)})"
    return code_span(kind)


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
            f"| {code_span(shown[:160])} | {inline_md(str(example.get('library', '')))} "
            f"| {inline_md(str(example.get('versions', '')))} | {inline_md(str(example.get('source', '')))} |"
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
    lines = [f"### {plain(data.get('title') or rule.id)}{anchor}", ""]
    meta = f"Rule {code_span(rule.id)} in {code_span(rule.file)}"
    if isinstance(data.get("confidence"), (int, float)):
        meta += f", confidence {data['confidence']:.2f} when its condition holds"
    if link_entry:
        meta += f"; diagnoses {plain(link_entry)}"
    lines += [meta + ".", ""]
    if data.get("description"):
        lines += [prose(data["description"]), ""]
    if data.get("condition"):
        lines += ["It reports a finding when this condition holds:", ""]
        lines += [fenced(str(data["condition"]).strip(), "text"), ""]
    rows = []
    for name, spec in (data.get("matchers") or {}).items():
        rows.append(f"| {code_span(name)} | matcher | {_describe_matcher(spec)} |")
    for name, spec in (data.get("series") or {}).items():
        if isinstance(spec, dict):
            what = f"per-rank series of {code_span(spec.get('value'))} from {code_span(spec.get('matcher'))}"
        else:
            what = "series"
        rows.append(f"| {code_span(name)} | series | {what} |")
    for name, spec in (data.get("detectors") or {}).items():
        rows.append(f"| {code_span(name)} | detector | {_describe_detector(spec)} |")
    if rows:
        lines += ["| Part | Kind | What it looks for |", "|---|---|---|", *rows, ""]
    lines += _render_examples(data.get("examples"))
    lines += [
        f'??? note "The rule\'s source: {plain(rule.file)}"',
        "",
        fenced(rule.text, "yaml", indent="    "),
        "",
    ]
    return "\n".join(lines)
