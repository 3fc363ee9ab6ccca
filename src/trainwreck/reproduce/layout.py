"""Where a run's outputs go under build/, and the record a run starts from."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainwreck.reproduce.host import cpu_model, now
from trainwreck.reproduce.records import EvidenceFiles, Host, RunRecord, Status
from trainwreck.reproduce.targets import Target


@dataclass
class Layout:
    root: Path
    build: Path

    @property
    def manifest(self) -> Path:
        return self.build / "manifest.json"

    def executed(self, entry_id: str) -> Path:
        return self.build / "executed" / f"{entry_id}.ipynb"

    def evidence(self, entry_id: str) -> Path:
        return self.build / "evidence" / entry_id

    def cache(self, digest: str) -> Path:
        return self.build / "cache" / digest

    def lock(self, entry_id: str) -> Path:
        return self.build / "locks" / f"{entry_id}.lock"

    def kernel_log(self, entry_id: str) -> Path:
        return self.build / "kernel-logs" / f"{entry_id}.log"

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)


def evidence_files(layout: Layout, directory: Path) -> EvidenceFiles:
    def files(sub: str) -> tuple[str, ...]:
        base = directory / sub
        if not base.is_dir():
            return ()
        return tuple(layout.rel(p) for p in sorted(base.rglob("*")) if p.is_file())

    metrics = directory / "metrics.json"
    figures = sorted(directory.rglob("*.png")) if directory.is_dir() else []
    return EvidenceFiles(
        dir=layout.rel(directory),
        broken=files("broken"),
        fixed=files("fixed"),
        metrics=layout.rel(metrics) if metrics.is_file() else None,
        figures=tuple(layout.rel(p) for p in figures),
    )


def base_record(target: Target, layout: Layout, status: Status, digest: str | None) -> RunRecord:
    """The record of a run that has not produced anything (yet): this host, now, no evidence.
    A notebook that is skipped or cannot be reproduced never starts, so it has no start time
    (and a build that skips it again writes the same record, leaving the pages' key alone)."""
    never_starts = status in (Status.NOT_REPRODUCIBLE, Status.SKIPPED_NEEDS_GPU)
    return RunRecord(
        id=target.id,
        notebook=target.notebook,
        device=target.device if target.device in ("cpu", "gpu") else "cpu",
        status=status,
        source_hash=digest,
        host=Host(cpu=cpu_model()),
        started=None if never_starts else now(),
        evidence=EvidenceFiles(dir=layout.rel(layout.evidence(target.id))),
    )


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; build outputs are read by other users/tools
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
