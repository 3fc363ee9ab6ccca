"""A snapshot of what diagnose and explain print on every regression log, to show a refactor
changes nothing.

    python tests/output_snapshot.py write build/snapshot-before     # (about 10 minutes on 2 cores)
    python tests/output_snapshot.py write build/snapshot-after
    python tests/output_snapshot.py compare build/snapshot-before build/snapshot-after

For every file and every folder under tests/logs/ and recordings/, it runs `diagnose` (its JSON,
text and Markdown reports) and `explain` (JSON and text) for each rule of the entry the log
belongs to and each rule that fired on it, and writes one JSON file per input. Only what
differs from run to run or machine to machine is normalised: the seconds a run took and the
repository's own absolute path. `compare` names every input whose outputs differ and shows the
first differing lines of each (exit 1 when any does).

It calls the public API (`diagnose`, its renderers, `explain`) with the checkout's rules and no
installed rule packs, so it runs the same before and after a change of the modules behind it.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import multiprocessing
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tests/logs", "recordings")

_STATE: dict[str, Any] = {}


def inputs() -> list[str]:
    """Every file and folder under FOLDERS, as paths relative to the root (their display)."""
    found: list[str] = []
    for top in FOLDERS:
        base = ROOT / top
        if not base.is_dir():
            continue
        found.append(top)
        found.extend(str(p.relative_to(ROOT)) for p in sorted(base.rglob("*")))
    return found


def _rule_set() -> Any:
    try:  # the module that finds rule packs moved with issue 29
        from trainwreck.compile.packs import resolve
    except ImportError:
        from trainwreck.rules.bundle import resolve  # type: ignore[no-redef]
    return resolve(ROOT, None, use_installed=False)


def _render(report: Any, fmt: str) -> str:
    try:
        from trainwreck.formats import render
    except ImportError:
        from trainwreck.diagnose import render  # type: ignore[no-redef]
    return render(report, fmt)  # type: ignore[no-any-return]


def _explained(path: str, rule_id: str) -> dict[str, str]:
    from trainwreck import explain as ex

    try:
        data = ex.explain([path], rule_id, ROOT, use_installed=False)
    except Exception as exc:  # an error is an output too
        return {"error": f"{type(exc).__name__}: {exc}"}
    plain = data.to_json() if hasattr(data, "to_json") else data
    return {"json": json.dumps(plain, indent=2), "text": ex.format_text(data)}


def normalise(value: Any) -> Any:
    """`value` with every string in it normalised (the outputs hold JSON documents as text)."""
    if isinstance(value, dict):
        return {key: normalise(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalise(item) for item in value]
    if not isinstance(value, str):
        return value
    text = value.replace(str(ROOT), "<ROOT>")
    text = re.sub(r'"seconds": [0-9.e+-]+', '"seconds": 0', text)
    # the text report's head line: "... 1.2 MB, 0.34 s, 87 rules"
    return re.sub(r"(MB), [0-9.]+ s, ", r"\1, <T> s, ", text)


def snapshot_of(path: str) -> dict[str, Any]:
    from trainwreck.diagnose import diagnose

    rule_set = _STATE["rule_set"]
    out: dict[str, Any] = {"input": path}
    try:
        report = diagnose([path], ROOT, rule_set=rule_set)
    except Exception as exc:
        out["diagnose_error"] = f"{type(exc).__name__}: {exc}"
        report = None
    fired: list[str] = []
    if report is not None:
        out["warnings"] = report.warnings
        for fmt in ("json", "text", "markdown"):
            out[fmt] = _render(report, fmt)
        fired = sorted(report.rules)
    parts = Path(path).parts
    entry = parts[2] if len(parts) > 2 and parts[:2] == ("tests", "logs") else None
    own = sorted(r["id"] for r in rule_set.rules if entry is not None and r["entry"] == entry)
    explained = sorted(set(own) | set(fired)) or sorted(r["id"] for r in rule_set.rules)[:1]
    out["explain"] = {rule_id: _explained(path, rule_id) for rule_id in explained}
    return normalise(out)  # type: ignore[no-any-return]


def _name(path: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", path)[-80:]
    return f"{slug}.{hashlib.sha1(path.encode()).hexdigest()[:8]}.json"


def write(folder: Path, jobs: int, only: str | None) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    _STATE["rule_set"] = _rule_set()
    todo = [p for p in inputs() if only is None or only in p]
    folder.mkdir(parents=True, exist_ok=True)
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.imap(snapshot_of, todo, chunksize=4)
            for done, found in enumerate(results, 1):
                _save(folder, found)
                if done % 100 == 0:
                    print(f"{done}/{len(todo)}", file=sys.stderr)
    else:
        for found in map(snapshot_of, todo):
            _save(folder, found)
    print(f"{len(todo)} inputs written to {folder}")


def _save(folder: Path, found: dict[str, Any]) -> None:
    text = json.dumps(found, indent=1, sort_keys=True, ensure_ascii=False)
    (folder / _name(found["input"])).write_text(text + "\n", encoding="utf-8")


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    differing = 0
    for name in names:
        a, b = before / name, after / name
        if not (a.is_file() and b.is_file()):
            print(f"only in {'after' if b.is_file() else 'before'}: {name}")
            differing += 1
            continue
        old, new = normalise(json.loads(a.read_text())), normalise(json.loads(b.read_text()))
        if old == new:
            continue
        differing += 1
        print(f"differs: {old['input']}")
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                left, right = _lines(old.get(key)), _lines(new.get(key))
                diff = list(difflib.unified_diff(left, right, key, key, lineterm="", n=1))
                print("\n".join(diff[:40]))
    print(f"{len(names)} inputs compared, {differing} differ")
    return 1 if differing else 0


def _lines(value: Any) -> list[str]:
    """An output as lines to diff: a text as its own lines, anything else as indented JSON."""
    if isinstance(value, str):
        return value.splitlines()
    if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
        return [f"{k}/{f}: {line}" for k, v in value.items() for f in v for line in _lines(v[f])]
    return json.dumps(value, indent=1, sort_keys=True).splitlines()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write a snapshot")
    w.add_argument("folder", type=Path)
    w.add_argument("--jobs", type=int, default=2)
    w.add_argument("--only", help="only inputs whose path holds this text")
    c = sub.add_parser("compare", help="compare two snapshots")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.folder, args.jobs, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
