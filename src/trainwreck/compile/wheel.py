"""Writing the rule pack as a wheel, offline, with the standard library only.

A wheel is a zip with the package files and a `<name>-<version>.dist-info/` folder: METADATA,
WHEEL, entry_points.txt and RECORD (sha256 and size of every file). The pack registers its bundle
in the entry-point group `trainwreck.rules`, which `trainwreck diagnose` reads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from trainwreck import __version__

_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same rules give the same wheel


def normalise(name: str) -> str:
    """Distribution name as used in file names (PEP 427/503): runs of -_. become _."""
    return re.sub(r"[-_.]+", "_", name).lower()


def valid_version(version: str) -> bool:
    return bool(re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", version))


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
