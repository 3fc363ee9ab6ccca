"""build/manifest.json: the records of this run plus the earlier ones that are still current."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from trainwreck import __version__
from trainwreck.reproduce.host import now
from trainwreck.reproduce.layout import Layout, atomic_write
from trainwreck.reproduce.records import RunRecord, Status
from trainwreck.reproduce.source import SCALES, read_notebook_json, source_hash
from trainwreck.reproduce.targets import Target

MANIFEST_VERSION = 1
Manifest = dict[str, Any]


def write_manifest(layout: Layout, records: list[RunRecord], targets: list[Target]) -> Manifest:
    """Write the records just made, plus earlier records of other notebooks that are still
    current (their notebook still hashes to the recorded source_hash)."""
    import fcntl

    layout.build.mkdir(parents=True, exist_ok=True)
    by_id = {t.id: t for t in targets}
    fresh = {r.id for r in records}
    with open(layout.build / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous: list[RunRecord] = []
        with contextlib.suppress(OSError, ValueError, AttributeError):
            old = json.loads(layout.manifest.read_text(encoding="utf-8"))
            previous = [
                RunRecord.from_json(r)
                for r in old.get("notebooks", [])
                if isinstance(r, dict) and isinstance(r.get("id"), str)
            ]
        kept = [
            r
            for r in previous
            if r.id not in fresh and r.id in by_id and _still_current(layout, r, by_id[r.id])
        ]
        manifest = {
            "version": MANIFEST_VERSION,
            "generated": now(),
            "toolkit_version": __version__,
            "notebooks": [r.to_json() for r in sorted([*kept, *records], key=lambda r: r.id)],
        }
        atomic_write(layout.manifest, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _still_current(layout: Layout, record: RunRecord, target: Target) -> bool:
    if target.not_reproducible is not None:
        return record.status is Status.NOT_REPRODUCIBLE
    try:
        notebook = read_notebook_json(layout.root / target.notebook)
    except (OSError, ValueError):
        return False
    return any(
        source_hash(notebook, target.reproduction, scale) == record.source_hash for scale in SCALES
    )
