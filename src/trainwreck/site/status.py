"""The honest status of an entry: what its page may say about its reproduction and its facts.

The reproduction status comes from the entry's manifest record checked against the current
notebook source: a page never claims a run that did not happen for the source it shows. The review
status comes from the entry's `checked` block checked against the entry's content digest: a page
says "reviewed" only while the entry still is what was checked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainwreck.knowledge.checked import Checked, is_current
from trainwreck.model import Entry, Reproduction
from trainwreck.reproduce.records import RunRecord, Status, status_word
from trainwreck.reproduce.source import SCALES, source_hash
from trainwreck.site.text import first_sentence, human_date


@dataclass
class PageStatus:
    """What the page says about the reproduction, and whether it may show the outputs."""

    # reproduced | recorded | replayed | stale | needs-gpu | not-reproducible | failed | not-run
    kind: str
    label: str  # short: for index tables
    sentence: str  # the badge text
    admonition: str  # material admonition type
    show_outputs: bool  # only for a run of the current source
    record: RunRecord | None = None


def current_hashes(root: Path, entry: Entry | Reproduction) -> set[str]:
    """The source hashes the current notebook would have at each scale (empty if unknown), of
    a reproduction or of an entry's first one."""
    reproduction = entry if isinstance(entry, Reproduction) else _first(entry)
    notebook = reproduction.notebook if reproduction is not None else None
    if reproduction is None or not notebook:
        return set()
    try:
        data = json.loads((root / notebook).read_text(encoding="utf-8"))
        return {source_hash(data, reproduction.data, scale) for scale in SCALES}
    except (OSError, ValueError, TypeError, AttributeError):
        return set()


def _first(entry: Entry) -> Reproduction | None:
    found = entry.reproductions
    return found[0] if found else None


@dataclass
class ReproductionStatus:
    """One reproduction of an entry and what its part of the page says about it."""

    reproduction: Reproduction
    status: PageStatus
    title: str  # what it is: "GPU notebook", "CPU replay of the allocator's rules", ...


# What a replay notebook replays (the schema's `replay` values), as the page names it.
REPLAYS = {"allocator": "the CUDA caching allocator's rules"}
# The entry's chip for several reproductions: the strongest run shown, in this order.
_KIND_ORDER = (
    "reproduced",
    "recorded",
    "replayed",
    "failed",
    "stale",
    "needs-gpu",
    "not-run",
    "not-reproducible",
)


def reproduction_title(reproduction: Reproduction) -> str:
    if reproduction.not_reproducible is not None:
        return "Not reproducible"
    if reproduction.replay:
        return f"CPU replay of {REPLAYS.get(reproduction.replay, reproduction.replay)}"
    return f"{reproduction.device.upper()} notebook"


def reproduction_statuses(
    root: Path, entry: Entry, records: Mapping[str, RunRecord]
) -> list[ReproductionStatus]:
    """Each reproduction of the entry with its own honest status, from its own record."""
    reproductions = entry.reproductions
    several = len(reproductions) > 1
    return [
        ReproductionStatus(
            r,
            reproduction_status(r, records.get(r.id), current_hashes(root, r), several=several),
            reproduction_title(r),
        )
        for r in reproductions
    ]


def entry_status(parts: list[ReproductionStatus]) -> PageStatus:
    """What the entry's chip, quick answer and index rows say: the one reproduction's status,
    or for several the strongest one's kind with every reproduction's sentence."""
    if len(parts) == 1:
        return parts[0].status
    if not parts:
        return PageStatus(
            "not-run", "not yet run", "Not yet reproduced: no reproduction.", "warning", False
        )
    ranked = sorted(
        parts,
        key=lambda p: (
            _KIND_ORDER.index(p.status.kind) if p.status.kind in _KIND_ORDER else len(_KIND_ORDER)
        ),
    )
    best = ranked[0].status
    # A green box only when every part is green: a replay that passed is not the GPU run.
    admonitions = {p.status.admonition for p in parts}
    return PageStatus(
        best.kind,
        best.label,
        " ".join(p.status.sentence for p in parts),
        best.admonition if len(admonitions) == 1 else "info",
        False,  # each reproduction's own part shows its outputs
    )


def status_for(entry: Entry, record: RunRecord | None, hashes: set[str]) -> PageStatus:
    """The honest status of an entry's (first) reproduction.

    `record` is its manifest record (or None) and `hashes` the source hashes of the current
    notebook: a record whose hash is not among them ran an older notebook and is stale.
    """
    reproduction = _first(entry) or Reproduction(entry.id, entry.id, {}, ("reproduction",))
    return reproduction_status(reproduction, record, hashes)


def reproduction_status(
    reproduction: Reproduction,
    record: RunRecord | None,
    hashes: set[str],
    *,
    several: bool = False,
) -> PageStatus:
    """The honest status of one reproduction; `several`: the entry has others, so the
    sentence says which one it is about."""
    status = _reproduction_status(reproduction, record, hashes)
    if not several:
        return status
    title = reproduction_title(reproduction)
    if status.kind == "needs-gpu":
        status.sentence = (
            "GPU notebook not run here: it needs a GPU, and no GPU recording of it exists yet."
        )
    elif status.kind != "replayed":
        sentence = status.sentence
        status.sentence = f"{title}: {sentence[:1].lower()}{sentence[1:]}"
    return status


def _reproduction_status(
    reproduction: Reproduction, record: RunRecord | None, hashes: set[str]
) -> PageStatus:
    if reproduction.not_reproducible is not None:
        reason = " ".join(reproduction.not_reproducible.split())
        return PageStatus(
            "not-reproducible",
            "not reproducible",
            f"Not reproducible: {reason}",
            "info",
            False,
        )
    device = reproduction.device
    if record is None:
        if device == "gpu":
            return _needs_gpu(None)
        return PageStatus(
            "not-run",
            "not yet run",
            "Not yet reproduced: this build has no run of the notebook "
            "(run `trainwreck build` without `--no-reproduce`).",
            "warning",
            False,
        )
    status = _from_record(record, device, hashes)
    if reproduction.replay and status.kind == "reproduced":
        return _replayed(record, reproduction.replay)
    return status


def _replayed(record: RunRecord, replay: str) -> PageStatus:
    """A replay that passed: it ran, on the CPU, for the current source, and it is a model."""
    where = record.host.cpu or "an unknown host"
    what = REPLAYS.get(replay, replay)
    return PageStatus(
        "replayed",
        "replayed on CPU",
        f"CPU replay ran on CPU for the current source, on {where} on "
        f"{human_date(record.started)}{_with_versions(record)}; fingerprint asserted. It "
        f"replays a model of {what} (trainwreck.memory), not a GPU run.",
        "success",
        True,
        record,
    )


def _from_record(record: RunRecord, device: str, hashes: set[str]) -> PageStatus:
    status = record.status
    current = not hashes or record.source_hash in hashes
    if status is Status.STALE or (status in (Status.PASSED, Status.RECORDED_GPU) and not current):
        return PageStatus(
            "stale",
            "stale",
            "Stale: the recorded run is for an older version of the notebook; "
            "its outputs are not shown.",
            "warning",
            False,
            record,
        )
    if status is Status.PASSED:
        return _reproduced(record, device)
    if status is Status.RECORDED_GPU:
        return _recorded(record)
    if status is Status.SKIPPED_NEEDS_GPU:
        return _needs_gpu(record)
    if status is Status.FAILED:
        return _failed(record)
    return PageStatus(
        "not-run",
        "not yet run",
        f"Not yet reproduced (manifest status {status_word(status)!r}).",
        "warning",
        False,
        record,
    )


def _versions(record: RunRecord) -> str:
    versions = record.versions
    parts = []
    if versions.python:
        parts.append(f"Python {versions.python}")
    if versions.torch:
        parts.append(f"torch {versions.torch}")
    if versions.cuda:
        parts.append(f"CUDA {versions.cuda}")
    return ", ".join(parts)


def _with_versions(record: RunRecord) -> str:
    versions = _versions(record)
    return f" with {versions}" if versions else ""


def _reproduced(record: RunRecord, device: str) -> PageStatus:
    host = record.host
    where = host.gpu if device == "gpu" and host.gpu else host.cpu
    where = where or "an unknown host"
    when = human_date(record.started)
    return PageStatus(
        "reproduced",
        "reproduced",
        f"Reproduced on {where} on {when}{_with_versions(record)}; fingerprint asserted.",
        "success",
        True,
        record,
    )


def _recorded(record: RunRecord) -> PageStatus:
    host = record.host
    gpu = host.gpu or "an unknown GPU"
    driver = f", driver {host.driver}" if host.driver else ""
    when = human_date(record.started)
    return PageStatus(
        "recorded",
        "recorded on GPU",
        f"Recorded on GPU {gpu} on {when}{_with_versions(record)}{driver}; fingerprint asserted.",
        "success",
        True,
        record,
    )


def _needs_gpu(record: RunRecord | None) -> PageStatus:
    return PageStatus(
        "needs-gpu",
        "needs a GPU",
        "Not yet reproduced: needs a GPU, and no GPU recording of this notebook exists yet.",
        "warning",
        False,
        record,
    )


def _failed(record: RunRecord) -> PageStatus:
    error = record.error
    cell = error.cell if error is not None else None
    stopped = f"stopped at cell {cell}" if isinstance(cell, int) and cell >= 0 else "failed"
    message = first_sentence(str((error.message if error else None) or "unknown error"), 200)
    return PageStatus(
        "failed",
        "failed",
        f"Failed: the last run, on {human_date(record.started)}, {stopped}: {message}",
        "failure",
        False,
        record,
    )


@dataclass
class ReviewStatus:
    """What the page says about the independent check of the entry's facts."""

    kind: str  # reviewed | changed | not-reviewed
    label: str  # the badge
    sentence: str  # the line beside the reproduction status
    admonition: str  # material admonition type
    checked: Checked | None = None


def review_status_for(entry: Entry) -> ReviewStatus:
    """ "reviewed <date>" only while the `checked` block's digest matches the entry as it stands;
    "changed since review" once the entry was edited after its check; "not yet reviewed" without
    a block, whatever the entry's `status` field claims."""
    checked = Checked.from_dict(entry.data.get("checked"))
    if checked is None:
        return ReviewStatus(
            "not-reviewed",
            "not yet reviewed",
            "Not yet reviewed: no one who did not write this entry has checked its facts "
            "claim by claim yet.",
            "warning",
        )
    claims = checked.claims
    totals = (
        f"{claims.checked} claims checked: {claims.held} held, {claims.corrected} corrected, "
        f"{claims.unconfirmed} unconfirmed"
    )
    if is_current(entry):
        return ReviewStatus(
            "reviewed",
            f"reviewed {checked.date}",
            f"Reviewed on {checked.date} by {checked.by}; {totals}.",
            "success",
            checked,
        )
    return ReviewStatus(
        "changed",
        "changed since review",
        f"Changed since review: the entry was edited after its check on {checked.date} "
        f"({totals}); the changed claims have not been checked again.",
        "warning",
        checked,
    )
