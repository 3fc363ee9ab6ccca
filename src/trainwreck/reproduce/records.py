"""The run record of one notebook, as build/manifest.json stores it, and its `Status`.

`RunRecord.to_json()` gives today's manifest record key for key and in the same order, so the
manifest's bytes do not depend on whether a record was made by this run or read back from an
earlier one; `RunRecord.from_json()` reads a record leniently (a hand-written or older manifest
may leave keys out), because a page must never crash on a manifest, only say less.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """What happened to a notebook. str-valued: the manifest stores the value as it always has."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED_NEEDS_GPU = "skipped-needs-gpu"
    RECORDED_GPU = "recorded-gpu"
    STALE = "stale"
    NOT_REPRODUCIBLE = "not-reproducible"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any) -> Status | str | None:
        """The member for a manifest word; a word this toolkit does not know (a newer
        toolkit's manifest) is kept as written so a page can quote it, and no word is None."""
        try:
            return cls(value)
        except ValueError:
            return value if value is None else str(value)


def status_word(status: Status | str | None) -> str | None:
    """The status as the manifest writes it (None when the record names none)."""
    return status.value if isinstance(status, Status) else status


def _text(value: Any) -> str | None:
    """A manifest string field; anything else a hand-written manifest put there, as text."""
    return value if value is None or isinstance(value, str) else str(value)


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Host:
    cpu: str | None = None
    gpu: str | None = None
    driver: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "gpu": self.gpu, "driver": self.driver}

    @classmethod
    def from_json(cls, data: Any) -> Host:
        data = _mapping(data)
        return cls(_text(data.get("cpu")), _text(data.get("gpu")), _text(data.get("driver")))


@dataclass(frozen=True)
class Versions:
    """Versions as the kernel saw them (None: not imported or not known)."""

    python: str | None = None
    torch: str | None = None
    cuda: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "torch": self.torch, "cuda": self.cuda}

    @classmethod
    def from_json(cls, data: Any) -> Versions:
        data = _mapping(data)
        return cls(_text(data.get("python")), _text(data.get("torch")), _text(data.get("cuda")))


@dataclass(frozen=True)
class EvidenceFiles:
    """What the run wrote under its evidence folder, as paths relative to the root."""

    dir: str | None = None
    broken: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    metrics: str | None = None
    figures: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": self.dir,
            "logs": {"broken": list(self.broken), "fixed": list(self.fixed)},
            "metrics": self.metrics,
            "figures": list(self.figures),
        }

    @classmethod
    def from_json(cls, data: Any) -> EvidenceFiles:
        data = _mapping(data)
        logs = _mapping(data.get("logs"))
        return cls(
            _text(data.get("dir")),
            _texts(logs.get("broken")),
            _texts(logs.get("fixed")),
            _text(data.get("metrics")),
            _texts(data.get("figures")),
        )


@dataclass(frozen=True)
class RunError:
    """Why a run failed: the source cell (-1: not in a cell), its code, the message and, for a
    failed cell, the last lines it printed."""

    cell: int | None
    source: str
    message: str | None
    output: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"cell": self.cell, "source": self.source, "message": self.message}
        if self.output is not None:
            data["output"] = self.output
        return data

    @classmethod
    def from_json(cls, data: Any) -> RunError | None:
        if not isinstance(data, Mapping):
            return None
        cell = data.get("cell")
        return cls(
            cell if isinstance(cell, int) and not isinstance(cell, bool) else None,
            str(data.get("source") or ""),
            _text(data.get("message")),
            _text(data.get("output")),
        )


@dataclass(frozen=True)
class RunRecord:
    """One notebook's entry in build/manifest.json."""

    id: str
    notebook: str  # "" for an entry that is not reproducible
    device: str  # cpu | gpu
    status: Status | str | None
    cached: bool = False
    source_hash: str | None = None
    executed: str | None = None  # the executed notebook, relative to the root
    host: Host = field(default_factory=Host)
    versions: Versions = field(default_factory=Versions)
    started: str | None = None  # ISO 8601, UTC
    duration_s: float = 0.0
    evidence: EvidenceFiles = field(default_factory=EvidenceFiles)
    error: RunError | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "notebook": self.notebook,
            "device": self.device,
            "status": status_word(self.status),
            "cached": self.cached,
            "source_hash": self.source_hash,
            "executed": self.executed,
            "host": self.host.to_json(),
            "versions": self.versions.to_json(),
            "started": self.started,
            "duration_s": self.duration_s,
            "evidence": self.evidence.to_json(),
            "error": self.error.to_json() if self.error is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        duration = data.get("duration_s")
        return cls(
            id=str(data.get("id") or ""),
            notebook=str(data.get("notebook") or ""),
            device=str(data.get("device") or "cpu"),
            status=Status.parse(data.get("status")),
            cached=bool(data.get("cached")),
            source_hash=_text(data.get("source_hash")),
            executed=_text(data.get("executed")),
            host=Host.from_json(data.get("host")),
            versions=Versions.from_json(data.get("versions")),
            started=_text(data.get("started")),
            duration_s=float(duration) if isinstance(duration, (int, float)) else 0.0,
            evidence=EvidenceFiles.from_json(data.get("evidence")),
            error=RunError.from_json(data.get("error")),
        )


def manifest_records(manifest: Mapping[str, Any] | None) -> dict[str, RunRecord]:
    """The records of a manifest by id (records without a string id are left out)."""
    records: dict[str, RunRecord] = {}
    notebooks = (manifest or {}).get("notebooks", []) if isinstance(manifest, Mapping) else []
    for record in notebooks or []:
        if isinstance(record, Mapping) and isinstance(record.get("id"), str):
            records[record["id"]] = RunRecord.from_json(record)
    return records
