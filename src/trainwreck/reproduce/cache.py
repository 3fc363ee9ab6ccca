"""The run cache: build/cache/<source hash>/ holds a passed run's executed notebook, evidence and
record, so an unchanged notebook is not executed again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from trainwreck.reproduce.layout import Layout, atomic_write, evidence_files
from trainwreck.reproduce.records import RunRecord, Status
from trainwreck.reproduce.source import with_current_prose
from trainwreck.reproduce.targets import Target


def store_cache(layout: Layout, record: RunRecord) -> None:
    """Copy the executed notebook and its evidence to build/cache/<hash>/ (atomically)."""
    final = layout.cache(str(record.source_hash))
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        tmp.chmod(0o755)  # mkdtemp makes 0700
        shutil.copy2(layout.root / str(record.executed), tmp / "executed.ipynb")
        shutil.copytree(layout.evidence(record.id), tmp / "evidence")
        (tmp / "record.json").write_text(json.dumps(record.to_json(), indent=2), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def restore_cache(layout: Layout, target: Target, digest: str) -> RunRecord | None:
    """The cached record for this hash, with its notebook and evidence restored into place."""
    directory = layout.cache(digest)
    try:
        data = json.loads((directory / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    record = RunRecord.from_json(data)
    if record.status is not Status.PASSED or record.source_hash != digest:
        return None
    if not (directory / "executed.ipynb").is_file() or not (directory / "evidence").is_dir():
        return None
    executed = layout.executed(target.id)
    executed.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = with_current_prose(
            (directory / "executed.ipynb").read_text(encoding="utf-8"),
            layout.root / target.notebook,
        )
    except (OSError, ValueError):
        return None
    if not _holds(executed, text):
        atomic_write(executed, text)
    evidence = layout.evidence(target.id)
    if not _same_tree(directory / "evidence", evidence):
        shutil.rmtree(evidence, ignore_errors=True)
        shutil.copytree(directory / "evidence", evidence)
    return dataclasses.replace(
        record,
        cached=True,
        id=target.id,
        notebook=target.notebook,
        executed=layout.rel(executed),
        evidence=evidence_files(layout, evidence),
    )


def _holds(path: Path, text: str) -> bool:
    """Whether `path` already holds `text` (a build with nothing changed rewrites nothing)."""
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, ValueError):
        return False


def _same_tree(source: Path, copy: Path) -> bool:
    """Whether `copy` has exactly the files of `source`, byte for byte."""

    def files(top: Path) -> dict[str, Path]:
        return {str(p.relative_to(top)): p for p in top.rglob("*") if p.is_file() or p.is_symlink()}

    try:
        theirs, ours = files(source), files(copy)
        if theirs.keys() != ours.keys():
            return False
        return all(
            not ours[name].is_symlink() and ours[name].read_bytes() == theirs[name].read_bytes()
            for name in theirs
        )
    except OSError:
        return False


@asynccontextmanager
async def id_lock(layout: Layout, entry_id: str) -> AsyncIterator[None]:
    """An advisory lock per id, so two runs in one tree do not write one evidence folder at
    the same time (the second then finds the first one's result in the cache)."""
    import fcntl

    path = layout.lock(entry_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - held for the duration of the context
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.5)
        yield
    finally:
        handle.close()
