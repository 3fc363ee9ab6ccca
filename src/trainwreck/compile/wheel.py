"""Writing the rule pack as a wheel, offline, with the standard library only.

A wheel is a zip with the package files and a `<name>-<version>.dist-info/` folder: METADATA,
WHEEL, entry_points.txt and RECORD (sha256 and size of every file). The pack registers its bundle
in the entry-point group `trainwreck.rules`, which `trainwreck diagnose` reads.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from trainwreck import __version__
from trainwreck.compile.packs import ENTRY_POINT_GROUP

TOOLKIT = "trainwreck"

_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same rules give the same wheel


def normalise(name: str) -> str:
    """Distribution name as used in file names (PEP 427/503): runs of -_. become _."""
    return re.sub(r"[-_.]+", "_", name).lower()


def valid_version(version: str) -> bool:
    return bool(re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", version))


def _requirement_name(requirement: str) -> str:
    """`numpy>=1.24; extra == 'x'` -> `numpy` (PEP 508: the name comes first)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return found.group(1) if found else ""


def _is_rule_pack(dist: metadata.Distribution) -> bool:
    return any(point.group == ENTRY_POINT_GROUP for point in dist.entry_points)


def name_taken(name: str) -> str | None:
    """Why a rule pack may not be called `name`, or None when it may.

    Installing a wheel replaces the installed distribution of the same name (pip uninstalls it
    first) and writes its package folder over any module of the same name: a pack called
    `numpy` or `trainwreck` would remove numpy or the toolkit. So a pack may not take the
    toolkit's name, the name of one of its dependencies (extras too, installed or not), the
    name of an installed distribution that is not a rule pack, or the import name of an
    installed module that no rule pack of that name provides. Another version of an installed
    rule pack may take its name: that is how a pack is upgraded."""
    wanted = normalise(name)
    try:
        requirements = metadata.requires(TOOLKIT) or []
    except metadata.PackageNotFoundError:  # running from a source tree
        requirements = []
    if wanted == normalise(TOOLKIT):
        return f"'{TOOLKIT}' is the toolkit itself"
    for requirement in requirements:
        if normalise(_requirement_name(requirement)) == wanted:
            return f"'{_requirement_name(requirement)}' is a dependency of {TOOLKIT}"
    owners: list[metadata.Distribution] = []
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"] or ""
        if normalise(dist_name) == wanted:
            if not _is_rule_pack(dist):
                return f"an installed distribution, {dist_name} {dist.version}, is not a rule pack"
            owners.append(dist)
    try:
        module = importlib.util.find_spec(wanted)
    except (ImportError, ValueError):
        module = None
    if module is not None and not owners:
        where = module.origin or ", ".join(module.submodule_search_locations or []) or "?"
        return f"its package folder '{wanted}' would take the place of the module at {where}"
    return None


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def write_wheel(bundle: dict[str, Any], out_dir: Path, *, name: str, version: str) -> Path:
    module = normalise(name)
    dist_info = f"{module}-{version}.dist-info"
    rules = bundle.get("rules", [])
    entries = bundle.get("entries", {})
    init = (
        f'"""Compiled Trainwreck rules: {len(rules)} rules for {len(entries)} entries (pack {name} {version}).\n\n'
        "Installed rule packs are found by `trainwreck diagnose` through the entry-point group\n"
        '`trainwreck.rules`; `bundle_path()` is that entry point."""\n\n'
        "from pathlib import Path\n\n"
        f'__version__ = "{version}"\n\n\n'
        "def bundle_path() -> str:\n"
        '    """Path of the compiled rule bundle (JSON) shipped in this package."""\n'
        '    return str(Path(__file__).with_name("bundle.json"))\n\n\n'
        "def entries_path() -> str:\n"
        '    """Path of the entry summaries (title, root cause, fix, verify, URL) of this pack."""\n'
        '    return str(Path(__file__).with_name("entries.json"))\n'
    )
    metadata_text = (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        f"Summary: Trainwreck detection rules: {len(rules)} rules for {len(entries)} failures\n"
        "Requires-Python: >=3.10\n"
        f"Requires-Dist: trainwreck>={__version__}\n"
        "Description-Content-Type: text/markdown\n"
        "\n"
        f"# {name}\n\nCompiled detection rules for `trainwreck diagnose`. Install next to the\n"
        "`trainwreck` core package; `trainwreck diagnose LOGS` then uses them.\n\n"
        + "".join(f"- `{rule['id']}` -> {rule['entry']}: {rule['title']}\n" for rule in rules)
    )
    wheel_text = (
        "Wheel-Version: 1.0\n"
        f"Generator: trainwreck {__version__}\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    )
    entry_points = f"[trainwreck.rules]\n{name} = {module}:bundle_path\n"
    files: list[tuple[str, bytes]] = [
        (f"{module}/__init__.py", init.encode()),
        (
            f"{module}/bundle.json",
            json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode(),
        ),
        (f"{module}/entries.json", json.dumps(entries, sort_keys=True, indent=1).encode()),
        (f"{dist_info}/METADATA", metadata_text.encode()),
        (f"{dist_info}/WHEEL", wheel_text.encode()),
        (f"{dist_info}/entry_points.txt", entry_points.encode()),
    ]
    record_lines = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files]
    record_lines.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record_lines) + "\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{module}-{version}-py3-none-any.whl"
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    tmp.replace(target)
    return target
