"""`trainwreck compile`: validate every rule, run its regression logs, write the bundle and wheel.

    trainwreck compile [--out DIR] [--no-wheel] [--no-tests] [--name NAME] [--pack-version V]

Every problem is one line `file:line:col: path: message`. Exit 0 when every rule is valid and
passes its regression logs, 1 otherwise (nothing is written then), 2 on usage errors.

`compile_pack(root, CompileOptions(...))` is the command without its printing, for `build`;
`compile_rules` validates and tests in memory. A rule's own tests (regression logs, examples)
live in compile/regression.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwreck import __version__, stamps
from trainwreck.compile.bundle import entry_summaries, make_bundle, site_url
from trainwreck.compile.regression import regression_files, run_example_tests, run_rule_tests
from trainwreck.compile.wheel import name_taken, normalise, valid_version, write_wheel
from trainwreck.errors import UsageError
from trainwreck.knowledge import KnowledgeBase
from trainwreck.knowledge.links import rule_side_problems
from trainwreck.markup import rule_markup_problems
from trainwreck.model import Problem

__all__ = [
    "CompileOptions",
    "CompileResult",
    "compile_pack",
    "compile_rules",
    "regression_files",
    "report",
    "run",
    "run_example_tests",
    "run_rule_tests",
]


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
            problems.extend(run_rule_tests(rule, root, document))
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


@dataclass(frozen=True)
class CompileOptions:
    """What `trainwreck compile` is asked to do (the command line's options, typed)."""

    out: str = "dist"  # folder for the wheel, under the root unless absolute
    bundle: str = "build/rules/bundle.json"  # under the root
    rules_dir: str | None = None  # default ROOT/rules
    wheel: bool = True
    tests: bool = True  # run every rule's regression logs and examples
    name: str | None = None  # default: [tool.trainwreck.pack] name, else trainwreck-rules
    version: str | None = None  # default: [tool.trainwreck.pack] version, else the toolkit's
    force: bool = False  # compile even when nothing it reads has changed

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CompileOptions:
        return cls(
            out=args.out,
            bundle=args.bundle,
            rules_dir=args.rules_dir,
            wheel=not args.no_wheel,
            tests=not args.no_tests,
            name=args.name,
            version=args.pack_version,
            force=bool(getattr(args, "force", False)),
        )


@dataclass(frozen=True)
class CompileResult:
    """What a compile found and wrote."""

    problems: list[Problem]
    ok: bool  # no error: the bundle (and wheel) were written
    message: str  # the one-line summary ("compiled N rules for M entries...: files"), or ""
    replayed: bool = False  # nothing changed since the last compile: its result, reported again
    written: list[Path] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


def compile_pack(
    root: Path, options: CompileOptions | None = None, *, kb: KnowledgeBase | None = None
) -> CompileResult:
    """Validate and test the rules of `root`, write the bundle and (unless told not to) the
    wheel; replay the last result when nothing it reads has changed. Raises UsageError for bad
    options. This is `trainwreck compile` without the printing (see `report`)."""
    root = Path(root)
    options = options or CompileOptions()
    try:
        pack = pack_settings(root)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    name = options.name or pack.get("name", "trainwreck-rules")
    version = options.version or pack.get("version", __version__)
    if not valid_version(version):
        raise UsageError(f"--pack-version '{version}' is not a valid version (e.g. 1.2.0)")
    if not normalise(name).replace("_", "").isalnum():
        raise UsageError(f"--name '{name}' is not a valid distribution name")
    if options.wheel and (taken := name_taken(name)) is not None:
        raise UsageError(
            f"rule pack name '{name}' would replace another distribution when installed "
            f"({taken}): choose another name (pyproject.toml [tool.trainwreck.pack] or --name)"
        )
    rules_dir = Path(options.rules_dir) if options.rules_dir else None
    if rules_dir is not None and not rules_dir.is_absolute():
        rules_dir = root / rules_dir
    key = compile_key(root, options, rules_dir, name, version)
    if not options.force:
        replayed = _replay(root, key)
        if replayed is not None:
            return replayed
    stamps.forget(root, "compile")
    bundle, problems = compile_rules(
        root,
        run_tests=options.tests,
        rules_dir=rules_dir,
        name=name,
        version=version,
        kb=kb if kb is not None and rules_dir is None else None,
    )
    if bundle is None:
        return CompileResult(problems, ok=False, message="")
    bundle_path = root / options.bundle
    bundle_path.parent.mkdir(parents=True, exist_ok=True)
    bundle_path.write_text(json.dumps(bundle, sort_keys=True), encoding="utf-8")
    written = [bundle_path]
    if options.wheel:
        out = Path(options.out)
        out = out if out.is_absolute() else root / out
        written.append(write_wheel(bundle, out, name=name, version=version))
    tested = ", regression logs pass" if options.tests else ""
    message = (
        f"compiled {len(bundle['rules'])} rules for {len(bundle['entries'])} entries{tested}: "
        + ", ".join(str(path) for path in written)
    )
    logs = sorted(
        {
            str(root / item)
            for rule in bundle["rules"]
            for kind in ("match", "clean")
            for item in rule["tests"][kind]
        }
        if options.tests
        else set()
    )
    stamps.save(
        root,
        "compile",
        key,
        {
            "problems": [p.to_json() for p in problems],
            "message": message,
            "outputs": stamps.digests(path.resolve() for path in written),
            "logs": stamps.digests(Path(path).resolve() for path in logs),
        },
    )
    return CompileResult(problems, ok=True, message=message, written=written)


def report(result: CompileResult, output: str = "text") -> None:
    """Print a compile's result as the command does: problems (stderr, or a JSON document on
    stdout), then the summary line."""
    if output == "json":
        problems = [p.to_json() for p in result.problems]
        print(json.dumps({"problems": problems, "ok": result.ok}, indent=2))
    else:
        for problem in result.problems:
            print(problem, file=sys.stderr)
    if not result.ok:
        # The problems above are the result; this closing line is part of it, not an error.
        print(f"trainwreck: {len(result.errors)} error(s); nothing written", file=sys.stderr)
    elif output == "text":
        suffix = " (unchanged since the last compile; --force compiles again)"
        print(result.message + (suffix if result.replayed else ""))


def run(args: argparse.Namespace) -> int:
    result = compile_pack(Path(args.root), CompileOptions.from_args(args))
    report(result, args.format)
    return 0 if result.ok else 1


def compile_key(
    root: Path, options: CompileOptions, rules_dir: Path | None, name: str, version: str
) -> str:
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
            options.bundle,
            options.out,
            not options.wheel,
            not options.tests,
            name,
            version,
        )
        .hexdigest()
    )


def _replay(root: Path, key: str) -> CompileResult | None:
    """The last compile's result when nothing it read has changed and what it wrote is intact;
    None when it must run."""
    stamp = stamps.load(root, "compile", key)
    if stamp is None or not stamps.unchanged(stamp.get("outputs")):
        return None
    if not stamps.unchanged(stamp.get("logs")):
        return None
    try:
        problems = [Problem(**p) for p in stamp.get("problems", [])]
        message = str(stamp["message"])
    except (TypeError, KeyError):
        return None
    return CompileResult(problems, ok=True, message=message, replayed=True)
