"""`trainwreck compile`: validate every rule, run its regression logs, write the bundle and wheel.

    trainwreck compile [--out DIR] [--no-wheel] [--no-tests] [--name NAME] [--pack-version V]

Every problem is one line `file:line:col: path: message`. Exit 0 when every rule is valid and
passes its regression logs, 1 otherwise (nothing is written then), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainwreck import __version__, stamps
from trainwreck.knowledge import KnowledgeBase
from trainwreck.knowledge.links import rule_side_problems
from trainwreck.markup import rule_markup_problems
from trainwreck.model import Document, Problem
from trainwreck.rules.bundle import RuleSet, entry_summaries, make_bundle, site_url
from trainwreck.rules.wheel import normalise, valid_version, write_wheel


def run_rule_tests(
    rule: dict[str, Any],
    root: Path,
    entries: dict[str, dict[str, Any]],
    document: Document | None = None,
) -> list[Problem]:
    """Run one rule alone on its regression logs: every `match` path must yield a finding of the
    rule, no `clean` path may."""
    from trainwreck.diagnose import UsageError, diagnose

    problems: list[Problem] = []
    rule_set = RuleSet(rules=[rule], entries=entries)
    source = rule.get("source", rule["id"])

    def where(kind: str, index: int, message: str) -> Problem:
        if document is not None:
            return document.problem(("tests", kind, index), message)
        return Problem(source, 1, 1, f"tests.{kind}[{index}]", message)

    for kind in ("match", "clean"):
        paths = rule["tests"][kind]
        if not paths:
            problems.append(where(kind, 0, f"at least one '{kind}' log is required"))
        for index, item in enumerate(paths):
            path = root / item
            if not os.path.lexists(path):
                problems.append(where(kind, index, f"regression log '{item}' does not exist"))
                continue
            files, refused = regression_files(root, str(item))
            if refused:
                problems.append(where(kind, index, refused))
                continue
            try:
                report = diagnose(files, root, rule_set=rule_set)
            except UsageError as exc:
                problems.append(where(kind, index, str(exc)))
                continue
            fired = rule["id"] in report.rules
            if kind == "match" and not fired:
                problems.append(where(kind, index, f"rule did not fire on '{item}' (it must)"))
            if kind == "clean" and fired:
                evidence = report.findings[0].evidence[:1]
                shown = os.path.relpath(evidence[0].file, root) if evidence else ""
                at = f" (first evidence {shown}:{evidence[0].line})" if evidence else ""
                problems.append(where(kind, index, f"rule fired on clean log '{item}'{at}"))
    return problems


def regression_files(root: Path, item: str) -> tuple[list[str], str | None]:
    """The files a regression log names (a file, or a folder of per-rank files), or why it may
    not be read. CI runs compile on pull requests: a path reaching outside the repository's
    tests/ (`..`, absolute, a symlink) would let a rule's pass or fail reveal any file's contents,
    and a FIFO or device would hang it. Everything is checked before anything is opened."""
    tests = (root / "tests").resolve()
    refusal = f"regression log '{item}' must be a regular file under tests/ of the repository"

    def confined(path: Path) -> bool:
        try:
            return path.resolve(strict=True).is_relative_to(tests)
        except (OSError, RuntimeError):  # dangling or looping symlink
            return False

    path = root / item
    if Path(item).is_absolute() or not confined(path):
        return [], refusal
    if not path.is_dir():
        return ([str(path)], None) if path.is_file() else ([], refusal)
    files: list[str] = []
    for folder, dirs, names in os.walk(path):  # the order diagnose walks a folder in
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            full = Path(folder, name)
            if not (confined(full) and full.is_file()):
                shown = os.path.relpath(full, root)
                return [], f"{refusal} (or a folder of them): '{shown}' is not"
            files.append(str(full))
    return files, None


def run_example_tests(rule: dict[str, Any], document: Document | None = None) -> list[Problem]:
    """Every example of the rule is recognised by it (by its `matcher` when one is named) and,
    unless `fires` is false, makes the rule fire on its own."""
    import io

    from trainwreck.rules import engine as eng

    problems: list[Problem] = []
    examples = rule.get("examples") or []
    if not examples:
        return problems
    engine = eng.Engine([rule])
    for index, example in enumerate(examples):
        scan = engine.scan([(f"example {index}", io.BytesIO(example["text"].encode()))], jobs=1)
        run = scan.runs[0]
        wanted = example.get("matcher")
        states = [run.matchers[wanted]] if wanted in run.matchers else list(run.matchers.values())
        message = None
        if not any(state.count for state in states):
            by = f"matcher '{wanted}'" if wanted else "any matcher"
            message = f"example is not recognised by {by}: {example['text'][:80]!r}"
        elif example.get("fires", True) and not eng.evaluate(run, scan).fired:
            message = f"rule does not fire on this example alone (set fires: false if it cannot): {example['text'][:80]!r}"
        if message is not None:
            if document is not None:
                problems.append(document.problem(("examples", index, "text"), message))
            else:
                problems.append(
                    Problem(rule.get("source", rule["id"]), 1, 1, f"examples[{index}]", message)
                )
    return problems


def compile_rules(
    root: Path,
    *,
    run_tests: bool = True,
    rules_dir: Path | None = None,
    name: str = "trainwreck-rules",
    version: str = __version__,
    kb: KnowledgeBase | None = None,
) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Validate and test every rule. Returns the bundle (None when any rule has an error)."""
    kb = kb or KnowledgeBase.load(root, rules_dir)
    loaded = kb.rules
    problems = list(loaded.problems)
    entries = entry_summaries(root, {rule["entry"] for rule in loaded.rules}, kb.entries)
    problems.extend(rule_side_problems(kb.validated_rule_links(), kb.by_id))
    for rule in loaded.rules:
        document = loaded.documents.get(rule["id"])
        if document is not None:
            problems.extend(rule_markup_problems(document))
        if run_tests:
            problems.extend(run_rule_tests(rule, root, entries, document))
            problems.extend(run_example_tests(rule, document))
    if not loaded.files:
        problems.append(Problem(str(rules_dir or "rules"), 1, 1, "", "no rules (*.yaml) found"))
    problems.sort()
    if any(p.severity == "error" for p in problems):
        return None, problems
    return make_bundle(
        loaded.rules, entries, name=name, version=version, base_url=site_url(root)
    ), problems


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default="dist", help="folder for the rule wheel (default dist/, under --root)"
    )
    parser.add_argument(
        "--bundle",
        default="build/rules/bundle.json",
        help="where to write the bundle (under --root)",
    )
    parser.add_argument("--rules-dir", default=None, help="rules folder (default ROOT/rules)")
    parser.add_argument(
        "--no-wheel", action="store_true", help="validate and write the bundle only"
    )
    parser.add_argument(
        "--no-tests", action="store_true", help="skip the regression logs (faster while editing)"
    )
    parser.add_argument(
        "--name",
        default=None,
        help="distribution name of the rule pack (default: [tool.trainwreck.pack] name in "
        "ROOT/pyproject.toml, else trainwreck-rules)",
    )
    parser.add_argument(
        "--pack-version",
        default=None,
        help="version of the rule pack (default: [tool.trainwreck.pack] version in "
        "ROOT/pyproject.toml, else the toolkit's)",
    )
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="problem output format"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="compile even when rules, entries and regression logs are unchanged since the last run",
    )


def pack_settings(root: Path) -> dict[str, str]:
    """[tool.trainwreck.pack] of ROOT/pyproject.toml, as written by `trainwreck new --pack`:
    the name and version of a private pack's wheel. Empty when there is none."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the core install declares tomli on 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not readable TOML ({exc})") from None
    table = data.get("tool", {}).get("trainwreck", {}).get("pack", {})
    if not isinstance(table, dict):
        return {}
    return {key: str(table[key]) for key in ("name", "version") if key in table}


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    try:
        pack = pack_settings(root)
    except ValueError as exc:
        print(f"trainwreck: {exc}", file=sys.stderr)
        return 2
    args.name = args.name or pack.get("name", "trainwreck-rules")
    args.pack_version = args.pack_version or pack.get("version", __version__)
    if not valid_version(args.pack_version):
        print(
            f"trainwreck: --pack-version '{args.pack_version}' is not a valid version (e.g. 1.2.0)",
            file=sys.stderr,
        )
        return 2
    if not normalise(args.name).replace("_", "").isalnum():
        print(f"trainwreck: --name '{args.name}' is not a valid distribution name", file=sys.stderr)
        return 2
    rules_dir = Path(args.rules_dir) if args.rules_dir else None
    if rules_dir is not None and not rules_dir.is_absolute():
        rules_dir = root / rules_dir
    key = compile_key(root, args, rules_dir)
    if not getattr(args, "force", False) and _replay(root, key, args.format):
        return 0
    stamps.forget(root, "compile")
    bundle, problems = compile_rules(
        root,
        run_tests=not args.no_tests,
        rules_dir=rules_dir,
        name=args.name,
        version=args.pack_version,
    )
    errors = [p for p in problems if p.severity == "error"]
    if args.format == "json":
        print(
            json.dumps(
                {"problems": [p.to_json() for p in problems], "ok": bundle is not None}, indent=2
            )
        )
    else:
        for problem in problems:
            print(problem, file=sys.stderr)
    if bundle is None:
        print(f"trainwreck: {len(errors)} error(s); nothing written", file=sys.stderr)
        return 1
    bundle_path = root / args.bundle
    bundle_path.parent.mkdir(parents=True, exist_ok=True)
    bundle_path.write_text(json.dumps(bundle, sort_keys=True), encoding="utf-8")
    written = [str(bundle_path)]
    if not args.no_wheel:
        out = Path(args.out)
        out = out if out.is_absolute() else root / out
        written.append(str(write_wheel(bundle, out, name=args.name, version=args.pack_version)))
    tested = "" if args.no_tests else ", regression logs pass"
    message = (
        f"compiled {len(bundle['rules'])} rules for {len(bundle['entries'])} entries{tested}: "
        + ", ".join(written)
    )
    if args.format == "text":
        print(message)
    logs = sorted(
        {
            str(root / item)
            for rule in bundle["rules"]
            for kind in ("match", "clean")
            for item in rule["tests"][kind]
        }
        if not args.no_tests
        else set()
    )
    stamps.save(
        root,
        "compile",
        key,
        {
            "problems": [p.to_json() for p in problems],
            "message": message,
            "outputs": stamps.digests(Path(path).resolve() for path in written),
            "logs": stamps.digests(Path(path).resolve() for path in logs),
        },
    )
    return 0


def compile_key(root: Path, args: argparse.Namespace, rules_dir: Path | None) -> str:
    """What a compile reads, besides the regression logs (those are listed in the stamp, as
    the rules name them): the toolkit, the schemas, the rules, the entries (their summaries go
    into the bundle), mkdocs.yml (the site URL) and the options."""
    return (
        stamps.Key("compile")
        .code()
        .tree(root / "schemas", "*.json")
        .tree(rules_dir or root / "rules", "*.yaml")
        .tree(root / "entries", "*.yaml")
        .file(root / "mkdocs.yml")
        .environment(root / "mkdocs.yml")
        .text(
            str(root.resolve()),
            str(rules_dir),
            args.bundle,
            args.out,
            args.no_wheel,
            args.no_tests,
            args.name,
            args.pack_version,
        )
        .hexdigest()
    )


def _replay(root: Path, key: str, output: str) -> bool:
    """Report the last compile again when nothing it read has changed and what it wrote is
    intact; False when it must run."""
    stamp = stamps.load(root, "compile", key)
    if stamp is None or not stamps.unchanged(stamp.get("outputs")):
        return False
    if not stamps.unchanged(stamp.get("logs")):
        return False
    try:
        problems = [Problem(**p) for p in stamp.get("problems", [])]
        message = str(stamp["message"])
    except (TypeError, KeyError):
        return False
    if output == "json":
        print(json.dumps({"problems": [p.to_json() for p in problems], "ok": True}, indent=2))
    else:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{message} (unchanged since the last compile; --force compiles again)")
    return True
