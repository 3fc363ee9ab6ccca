"""`trainwreck rules [--entry ID]`: the rules diagnose runs, with their entries and titles.

    trainwreck rules                       every rule: id, entry, title
    trainwreck rules --entry host-oom-sigkill

The ids it prints are what `trainwreck explain LOG... ID` and `diagnose --rule ID` take. It also
holds the one way a rule or entry id given on the command line is resolved (`pick_rules`), so
that a mistyped id gets the close ids as suggestions instead of an alphabetical list.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainwreck.errors import UsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.sanitize import report_text

if TYPE_CHECKING:
    from trainwreck.compile.packs import RuleSet
    from trainwreck.rules.rule import Rule

MAX_SUGGESTIONS = 5


def load_rules(
    root: str | Path,
    explicit: list[str] | None = None,
    *,
    use_installed: bool = True,
    kb: KnowledgeBase | None = None,
    rule_set: RuleSet | None = None,
) -> list[Rule]:
    """The rules diagnose would run (the checkout's, `--rules`, installed packs), typed;
    `rule_set`: the rules, when the caller has them resolved."""
    from trainwreck.compile.packs import resolve
    from trainwreck.rules.rule import read_rules

    # A BundleError is a UsageError: an unreadable --rules bundle is reported as such.
    if rule_set is None:
        rule_set = resolve(Path(root), explicit, use_installed=use_installed, source=kb)
    rules, _ = read_rules(rule_set.rules)  # (an unreadable rule is named by diagnose)
    return rules


def close_ids(wanted: str, known: set[str]) -> list[str]:
    """The known ids closest to a mistyped one: by spelling, then those that contain it."""
    close = difflib.get_close_matches(wanted, sorted(known), n=MAX_SUGGESTIONS, cutoff=0.6)
    containing = sorted(k for k in known if wanted and wanted in k and k not in close)
    return (close + containing)[:MAX_SUGGESTIONS]


def unknown_id_error(what: str, wanted: str, known: set[str]) -> UsageError:
    suggestions = close_ids(wanted, known)
    hint = (
        f"; did you mean {', '.join(suggestions)}?"
        if suggestions
        else "; `trainwreck rules` lists them"
    )
    return UsageError(f"no {what} '{wanted}'{hint}")


def pick_rules(rules: list[Rule], wanted: str) -> list[Rule]:
    """The rule with id `wanted`, or every rule of the entry `wanted` (the id diagnose prints
    for a finding); a UsageError naming the close ids otherwise."""
    by_id = [r for r in rules if r.id == wanted]
    if by_id:
        return by_id
    of_entry = [r for r in rules if r.entry == wanted]
    if of_entry:
        return sorted(of_entry, key=lambda r: r.id)
    known = {r.id for r in rules} | {r.entry for r in rules}
    raise unknown_id_error("rule or entry", wanted, known)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--entry", metavar="ID", help="only the rules that diagnose this entry")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--rules", action="append", metavar="PATH", help="a rule bundle or rules folder to use"
    )
    parser.add_argument("--no-installed", action="store_true", help="ignore installed rule packs")


def run(args: argparse.Namespace) -> int:
    rules = load_rules(
        args.root, args.rules, use_installed=not args.no_installed, kb=KnowledgeBase.load(args.root)
    )
    if args.entry:
        entries = {r.entry for r in rules}
        if args.entry not in entries:
            raise unknown_id_error("entry with rules", args.entry, entries)
        rules = [r for r in rules if r.entry == args.entry]
    rules = sorted(rules, key=lambda r: (r.entry, r.id))
    if args.format == "json":
        rows = [{"id": r.id, "entry": r.entry, "title": r.title} for r in rules]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    width = max((len(r.id) for r in rules), default=0)
    for rule in rules:
        sys.stdout.write(
            f"{report_text(rule.id):<{width}}  {report_text(rule.entry)}: "
            f"{report_text(rule.title)}\n"
        )
    return 0
