"""The review as Markdown, for a pull-request comment."""

from __future__ import annotations

from trainwreck.review.model import Change, Review
from trainwreck.review.text import _code, _entries_list, _problem_text

MARKER = "<!-- trainwreck-review -->"  # the PR workflow finds and updates its comment by this
MAX_PROBLEMS_SHOWN = 8


def render_markdown(review: Review) -> str:
    broken = review.broken
    head = f"{len(broken)} verdict(s) broken" if broken else "no verdict broken"
    out = [
        MARKER,
        f"## Trainwreck review: {head}",
        "",
        f"Compared with {_code(review.base_ref)} ({_code(review.base_commit[:12])}).",
    ]
    if broken:
        out += ["", "### Broken verdicts", ""] + [f"- {line}" for line in broken]

    out += ["", "### Entries", ""]
    if not review.entries:
        out.append("No entry added, changed or removed.")
    else:
        out += ["| entry | change | `trainwreck check` |", "|---|---|---|"]
        for entry in review.entries:
            if entry.change == Change.REMOVED:
                verdict = "-"
            elif entry.errors:
                verdict = f"**{len(entry.errors)} error(s)**"
            else:
                verdict = "passes"
            if entry.warnings:
                verdict += f", {len(entry.warnings)} warning(s)"
            out.append(f"| {_code(entry.id)} | {entry.change} | {verdict} |")
        for entry in review.entries:
            shown = (entry.errors + entry.warnings)[:MAX_PROBLEMS_SHOWN]
            if shown:
                out += ["", f"{_code(entry.id)}:", ""] + [f"- {_problem_text(p)}" for p in shown]
    if review.other_check_errors:
        out += ["", "New check errors in entries this change did not touch:", ""]
        out += [f"- {_problem_text(p)}" for p in review.other_check_errors[:MAX_PROBLEMS_SHOWN]]

    out += ["", "### Rules", ""]
    if not review.rules:
        out.append("No rule added, changed or removed, and every rule's verdict is unchanged.")
    else:
        out += ["| rule | entry | change | regression verdict |", "|---|---|---|---|"]
        for rule in review.rules:
            if rule.change == Change.REMOVED:
                verdict = "-"
            elif rule.passes:
                verdict = f"passes its {rule.tests} regression log(s)"
            else:
                verdict = f"**fails**: {len(rule.problems)} problem(s)"
                if rule.broken_on_base:
                    verdict += " (already on the base)"
            entry = _code(rule.entry) if rule.entry else "-"
            out.append(f"| {_code(rule.id)} | {entry} | {rule.change} | {verdict} |")
        for rule in review.rules:
            if rule.problems:
                out += ["", f"{_code(rule.id)}:", ""]
                out += [f"- {_problem_text(p)}" for p in rule.problems[:MAX_PROBLEMS_SHOWN]]

    out += ["", "### Diagnosis delta", ""]
    out.append(
        f"{review.logs_read} regression log(s) and evidence folder(s) diagnosed with the whole "
        f"pack on both sides; {len(review.logs)} changed."
    )
    if review.logs:
        out += ["", "| log | expected | base | this change | verdict |", "|---|---|---|---|---|"]
        for delta in review.logs:
            if delta.broken:
                verdict = "**broken**: " + "; ".join(delta.broken)
            elif delta.base is None:
                verdict = "new log"
            elif delta.head is None:
                verdict = "log removed"
            else:
                parts = []
                if delta.first_changed:
                    parts.append("first finding changed")
                if delta.gained:
                    parts.append("gained " + ", ".join(_code(e) for e in delta.gained))
                if delta.lost:
                    parts.append("lost " + ", ".join(_code(e) for e in delta.lost))
                verdict = "; ".join(parts) or "order changed"
            expected = ", ".join(_code(e) for e in delta.expect) or "-"
            out.append(
                f"| {_code(delta.path)} | {expected} | {_entries_list(delta.base)} "
                f"| {_entries_list(delta.head)} | {verdict} |"
            )

    out += ["", "### Notebooks", ""]
    if not review.notebooks:
        out.append("No notebook added, changed or removed.")
    else:
        out += ["| notebook | change | run status |", "|---|---|---|"]
        for notebook in review.notebooks:
            change = str(notebook.change)
            if notebook.change == Change.CHANGED:
                change += " (code)" if notebook.code_changed else " (prose only)"
            status = _code(notebook.status)
            if notebook.kind == "failed":
                status = f"**{status}**"
            out.append(f"| {_code(notebook.id)} | {change} | {status} |")

    out += ["", "### Pages affected", ""]
    out += [f"- {page}" for page in review.pages] or ["None."]
    return "\n".join(out) + "\n"
