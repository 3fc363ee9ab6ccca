"""The shape of the code (docs/architecture.md): dependencies point one way, modules stay small.

Layers, lowest first; a module may import its own layer and the ones below, never one above:

0. base: the loader and what every stage shares (model, errors, findings, markup, sanitize,
   vocabulary, stamps, the package itself);
1. rules: the rule language (rules/: its model and validation, conditions, the detector
   registry, units, the pattern dialect);
2. engine: the runtime that reads logs through compiled rules and judges them (engine/);
3. knowledge: the knowledge base over entries, rules and notebooks (knowledge/); hang forensics
   (forensics/: Flight Recorder and stack dumps, read as data), which diagnose and explain use
   and which imports only the base;
4. stages: check, reproduce, compile (compile/: the bundle, the wheel, finding rule packs),
   diagnose (with its output formats, formats.py), explain, rules (rule_list), new (scaffold),
   probe, export (alert rule files for Loki and Prometheus), scaleout (partial scan states
   merged, the scan on Dask), memory (the allocator replay:
   imports the base layer only, never torch);
5. pipelines: build (site), review and the MCP server (mcp), which drive several stages;
6. the command line (cli, __main__).

Imports inside functions count too: a lazy import that runs back up is still an upward edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "trainwreck"

BASE = {
    "trainwreck",
    "model",
    "errors",
    "findings",
    "markup",
    "sanitize",
    "vocabulary",
    "stamps",
    "placeholders",
}
STAGES = {
    "check",
    "reproduce",
    "compile",
    "diagnose",
    "formats",
    "explain",
    "rule_list",
    "scaffold",
    "probe",
    "export",
    "memory",
    "scaleout",
    "inputs",
}
PIPELINES = {"site", "review", "mcp"}
# Optional dependencies (extras) and the only modules that may import them: the core install
# (check, compile, diagnose, probe, export) must run without them.
OPTIONAL_IMPORTS = {
    "mcp": {"mcp.server"},
    "prometheus_client": {"probe.prometheus"},
    "dask": {"scaleout.cluster"},
    "distributed": {"scaleout.cluster"},
    "fsspec": {"scaleout.cluster"},
}
COMMAND_LINE = {"cli", "__main__"}
LAYER_NAMES = ("base", "rules", "engine", "knowledge", "stages", "pipelines", "command line")

# Modules allowed above MAX_LINES, each with the reason. A split module leaves this list.
MAX_LINES = 500
OVERSIZED = {
    "model.py": "the YAML loader's defences (nesting, aliases, tags, sizes) and the schema "
    "messages belong together",
    "probe/recorder.py": "the probe's recorder runs inside training jobs with no dependencies; "
    "one file users can read whole",
    "rules/condition.py": "the condition grammar (in the docstring) and its parser, together",
    "engine/detectors.py": "the detectors' numeric code, one function each",
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """src/trainwreck/engine/scanning.py -> "engine.scanning"; a package's __init__ is the package."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "trainwreck"


def layer(name: str) -> int:
    top = name.split(".")[0]
    if name in COMMAND_LINE:
        return 6
    if top in PIPELINES:
        return 5
    if top in STAGES:
        return 4
    if top in ("knowledge", "forensics"):
        return 3
    if top == "engine":
        return 2
    if top == "rules":
        return 1
    if name in BASE:
        return 0
    raise AssertionError(f"trainwreck.{name} has no layer: add it to tests/test_architecture.py")


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imported(path: Path, known: set[str], package_dir: Path = PACKAGE) -> set[str]:
    """The trainwreck modules `path` imports, anywhere in it (module level or in functions)."""
    own = module_name(path, package_dir)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()

    def add(dotted: str) -> None:
        # `from trainwreck.engine import scanning` names a module; `from trainwreck import
        # __version__` names the package.
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        found.add(dotted or "trainwreck")

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "trainwreck" or alias.name.startswith("trainwreck."):
                    add(alias.name.removeprefix("trainwreck").lstrip("."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package upwards
                base = package.split(".") if package and package != "trainwreck" else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            elif node.module and (node.module + ".").startswith("trainwreck."):
                prefix = node.module.removeprefix("trainwreck").lstrip(".")
            else:
                continue
            for alias in node.names:
                add(f"{prefix}.{alias.name}".strip("."))
    found.discard(own)
    return found


def test_every_module_has_a_layer():
    for name in modules():
        layer(name)


def test_no_import_runs_back_up():
    known = set(modules())
    upward = []
    for name, path in modules().items():
        for target in sorted(imported(path, known)):
            if layer(target) > layer(name):
                upward.append(
                    f"trainwreck.{name} ({LAYER_NAMES[layer(name)]}) imports trainwreck.{target} "
                    f"({LAYER_NAMES[layer(target)]})"
                )
    assert not upward, "\n".join(upward)


ENGINE_NAMES = {"engine", "Engine", "eng"}  # how modules name the scanning Engine


def test_only_scanning_reaches_into_the_engine():
    """parallel.py and the stages use the Engine's public methods (scan_range, prepare,
    block_starts, new_runs): its private parts (_scan_file, the cursor's methods) can change
    without them."""
    reached = []
    for name, path in modules().items():
        if name == "engine.scanning":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in ENGINE_NAMES
            ):
                reached.append(f"{name}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not reached


# The recorder's entry points (docs/architecture.md, the scan path): every match of a scan is
# recorded through them, into store.store, the one recorder.
RECORDER_ENTRIES = {"record", "record_batch"}


def test_matches_are_recorded_by_the_one_recorder():
    """Outside engine/store.py, the engine reaches the recorder only through `record` (a line on
    its own) and `record_batch` (a busy block's rows): no module records a match itself, so
    there is one code for what a match leaves in a rule's state."""
    bypass = []
    for name, path in modules().items():
        if name == "engine.store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "trainwreck.engine.store":
                bypass += [
                    f"{name}:{node.lineno}: imports store.{alias.name}"
                    for alias in node.names
                    if alias.name not in RECORDER_ENTRIES
                ]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "store"
                and node.attr not in RECORDER_ENTRIES
                and name.startswith("engine.")
            ):
                bypass.append(f"{name}:{node.lineno}: store.{node.attr}")
    assert not bypass, "\n".join(bypass)


def test_the_import_scan_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: a lazy import inside a function and a relative import are found,
    and an import of the command line from the engine counts as running back up."""
    fake = tmp_path / "trainwreck"
    (fake / "engine").mkdir(parents=True)
    for name in ("__init__.py", "cli.py", "engine/__init__.py", "engine/state.py"):
        (fake / name).write_text("")
    (fake / "engine" / "scanning.py").write_text(
        "def f():\n    from trainwreck.cli import main\n    from . import state\n"
    )
    found = imported(fake / "engine" / "scanning.py", set(modules(fake)), fake)
    assert found == {"cli", "engine.state"}
    assert layer("cli") > layer("engine.scanning")


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_modules_stay_small(path: Path):
    relative = str(path.relative_to(PACKAGE))
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if relative in OVERSIZED:
        assert lines > MAX_LINES, (
            f"{relative} is down to {lines} lines: remove it from OVERSIZED in {Path(__file__).name}"
        )
    else:
        assert lines <= MAX_LINES, (
            f"{relative} has {lines} lines (limit {MAX_LINES}): split it by concern, or list it "
            "in OVERSIZED with the reason"
        )


def test_oversized_lists_only_existing_modules():
    missing = [name for name in OVERSIZED if not (PACKAGE / name).is_file()]
    assert not missing, f"remove from OVERSIZED (no such module any more): {missing}"


def test_forensics_imports_only_the_base():
    """diagnose -> forensics, never back: the dump reader stands on the shared types alone."""
    known = set(modules())
    for name, path in modules().items():
        if name.split(".")[0] == "forensics":
            above = {t for t in imported(path, known) if t.split(".")[0] != "forensics"}
            assert all(layer(t) == 0 for t in above), f"trainwreck.{name} imports {above}"


def test_every_package_is_a_regular_package():
    """Every folder of modules has an __init__.py: an implicit namespace package is found
    differently by packaging tools, type checkers and coverage."""
    folders = {path.parent for path in PACKAGE.rglob("*.py")}
    missing = [
        str(f.relative_to(PACKAGE)) for f in sorted(folders) if not (f / "__init__.py").is_file()
    ]
    assert not missing, f"add an __init__.py (with a docstring of its modules) to: {missing}"


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of the non-trainwreck modules `path` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    found.discard("trainwreck")
    return found


def test_optional_dependencies_stay_in_their_modules():
    """mcp and prometheus_client (extras) are imported only by the modules that need them, so
    the core install never imports them."""
    misplaced = [
        f"trainwreck.{name} imports {dependency} (allowed only in {sorted(allowed)})"
        for name, path in modules().items()
        for dependency, allowed in OPTIONAL_IMPORTS.items()
        if dependency in third_party_imports(path) and name not in allowed
    ]
    assert not misplaced, "\n".join(misplaced)


def test_memory_replay_imports_only_the_base_layer_and_no_torch():
    """The allocator replay is core install: it reads pickles from strangers with the standard
    library, so it imports the base layer only, and never torch, numpy's rivals or jupyter."""
    known = set(modules())
    for name, path in modules().items():
        if not name.startswith("memory"):
            continue
        below = {t for t in imported(path, known) if not t.startswith("memory")}
        assert all(layer(t) == 0 for t in below), f"trainwreck.{name} imports {below}"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for imported_name in names:
                top = imported_name.split(".")[0]
                assert top not in {"torch", "jupyter", "mkdocs", "nbclient"}, (name, top)
