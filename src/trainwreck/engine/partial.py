"""The scan state of a subset of the inputs, saved to a file and merged with others into the
state one serial scan of all of them leaves (docs/scale-out.md describes the format).

A partial state is everything evaluation reads from a scan (ScanResult): per rule, its
matchers' counts, per-rank counts, first lines, evidence candidates, captured columns and
events, and its series' points per rank; the files read (with the byte range of a file scanned
in parts), those skipped, the ranks seen and the totals. Its file ids are its own (0 for its
first file); merging shifts them after the files of the states before it, so states merge in
input order exactly as parallel.merge folds the parts of a parallel scan: every list is the
concatenation of the states' lists cut at the same bounds (MAX_EVIDENCE_PER_MATCHER, MAX_ROWS),
first lines are the first seen, series are appended and thinned to the series budget. That is
associative: merging (a, b) then c leaves what merging a then (b, c) does.

The file is a zip of `state.json` (the format name, its version, the rules digest and the
state) and `series.npy` (every series point, one row of 7 doubles each, in the order
`state.json` lists the buffers). No pickle: reading a state runs no code of its writer.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trainwreck import __version__
from trainwreck.engine import detectors as det
from trainwreck.engine import parallel
from trainwreck.engine import state as st
from trainwreck.errors import UsageError
from trainwreck.findings import Evidence, FirstKey, Skipped

if TYPE_CHECKING:
    from trainwreck.engine.scanning import Engine

FORMAT = "trainwreck-scan-state"
VERSION = 1
SUFFIX = ".state"
STATE_MEMBER = "state.json"
SERIES_MEMBER = "series.npy"


class StateError(UsageError):
    """A scan state that cannot be read or merged (one line, naming the file)."""


def rules_digest(rules: Iterable[Mapping[str, Any]]) -> str:
    """The digest of the rules a state was scanned with (their bundle mappings, in order):
    states merge only under the very rules that wrote them."""
    text = json.dumps(list(rules), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# --- values as JSON ----------------------------------------------------------------------------


def _float(value: float) -> Any:
    """A double as JSON: a number, or "nan", "inf", "-inf" (JSON has no such numbers)."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _unfloat(value: Any) -> float:
    return float(value)


def _rank(rank: Any) -> Any:
    """A rank key: an int rank, a host label, null (unknown), or {"file": n} for the lines of
    unknown rank of one file (state.UnrankedFile)."""
    if rank is None or isinstance(rank, (int, str)):
        return rank
    if isinstance(rank, st.UnrankedFile):
        return {"file": rank.file}
    raise TypeError(f"a rank of type {type(rank).__name__} cannot be saved")


def _unrank(value: Any, offset: int) -> Any:
    if isinstance(value, dict):
        return st.UnrankedFile(int(value["file"]) + offset)
    return value


def _value(value: Any) -> Any:
    """A captured value: null, a boolean, an int, a string, a finite double, or
    {"float": "nan" | "inf" | "-inf"}."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": str(value)}
    raise TypeError(f"a captured value of type {type(value).__name__} cannot be saved")


def _unvalue(value: Any) -> Any:
    if isinstance(value, dict):
        return float(value["float"])
    return value


# --- writing -----------------------------------------------------------------------------------


def dump(
    result: st.ScanResult, digest: str, ranges: list[tuple[int, int] | None] | None = None
) -> bytes:
    """The saved form of a scan's state (`ranges`: per file, the byte range scanned, None for
    the whole file)."""
    ranges = ranges if ranges is not None else [None] * len(result.files)
    rules = []
    seen_series: set[int] = set()
    series_doc = []
    tables: list[np.ndarray] = []
    for run in result.runs:
        matchers = {name: _matcher_doc(state) for name, state in run.matchers.items()}
        rules.append({"id": run.rule.id, "matchers": matchers})
        for name, per_rank in run.series.items():
            if id(per_rank) in seen_series:
                continue  # shared by several rules: saved once, under its first rule
            seen_series.add(id(per_rank))
            buffers = []
            for rank, buffer in per_rank.items():
                buffers.append(
                    {
                        "rank": _rank(rank),
                        "rows": buffer.count,
                        "offered": buffer.offered,
                        "stride": buffer.stride,
                        "outlier_stride": buffer.outlier_stride,
                        "center": _float(buffer.center),
                        "spread": _float(buffer.spread),
                    }
                )
                table = np.frombuffer(buffer.rows, dtype=np.float64)
                tables.append(table.reshape(-1, st.SeriesBuffer.WIDTH))
            series_doc.append({"rule": run.rule.id, "name": name, "buffers": buffers})
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "rules_digest": digest,
        "written_by": f"trainwreck {__version__}",
        "files": [
            {"name": name, "range": list(piece) if piece is not None else None}
            for name, piece in zip(result.files, ranges, strict=True)
        ],
        "skipped": [
            {"file": s.file, "reason": s.reason, "unread": s.unread} for s in result.skipped
        ],
        "ranks_seen": [_rank(rank) for rank in result.ranks_seen],
        "lines": result.lines,
        "bytes": result.bytes,
        "unranked": result.unranked,
        "rules": rules,
        "series": series_doc,
    }
    rows = np.concatenate(tables) if tables else np.zeros((0, st.SeriesBuffer.WIDTH))
    array = io.BytesIO()
    np.save(array, np.ascontiguousarray(rows, dtype="<f8"), allow_pickle=False)
    out = io.BytesIO()
    # Deflate at its fastest for the JSON; the doubles are stored (deflating them costs more
    # time than the scan that made them, and saves little).
    with zipfile.ZipFile(out, "w") as archive:
        text = json.dumps(doc, separators=(",", ":"))
        archive.writestr(STATE_MEMBER, text, zipfile.ZIP_DEFLATED, compresslevel=1)
        archive.writestr(SERIES_MEMBER, array.getvalue(), zipfile.ZIP_STORED)
    return out.getvalue()


def _matcher_doc(state: st.MatcherState) -> dict[str, Any]:
    return {
        "count": state.count,
        "rank_counts": [[_rank(rank), count] for rank, count in state.rank_counts.items()],
        "evidence": [
            {
                "file_id": e.file_id,
                "line": e.line,
                "text": e.text,
                "rank": _rank(e.rank),
                "part": e.part,
                "t": _float(e.t),
                "offset": e.offset,
            }
            for e in state.evidence
        ],
        "first": [
            [_rank(rank), _float(key.t), key.file, key.line] for rank, key in state.first.items()
        ],
        "columns": {name: [_value(v) for v in values] for name, values in state.columns.items()},
        "events": None
        if state.events is None
        else [
            [_rank(e.rank), _float(e.index), _float(e.t), e.file, e.line, _float(e.value), e.offset]
            for e in state.events
        ],
        "truncated": state.truncated,
        "cut": state.cut,
    }


# --- reading -----------------------------------------------------------------------------------


@dataclass
class SavedState:
    """A state file as read: its document and series rows, not yet turned into rule state
    (which needs the file-id offset of its place in a merge)."""

    name: str  # where it was read from, for messages
    doc: dict[str, Any]
    rows: np.ndarray

    @property
    def digest(self) -> str:
        return str(self.doc["rules_digest"])

    @property
    def files(self) -> list[str]:
        return [str(item["name"]) for item in self.doc["files"]]

    @property
    def ranges(self) -> list[tuple[int, int] | None]:
        return [
            (int(item["range"][0]), int(item["range"][1])) if item["range"] is not None else None
            for item in self.doc["files"]
        ]


def load(data: bytes, name: str) -> SavedState:
    """Read a saved state; StateError (one line) when it is not one, or of another version."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            doc = json.loads(archive.read(STATE_MEMBER))
            rows_data = archive.read(SERIES_MEMBER)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise StateError(f"{name}: not a trainwreck scan state ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StateError(f"{name}: not a trainwreck scan state (no format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise StateError(
            f"{name}: scan state version {doc.get('version')!r} is not supported "
            f"(this trainwreck reads version {VERSION}); write it again with this version"
        )
    try:
        rows = np.load(io.BytesIO(rows_data), allow_pickle=False)
    except ValueError as exc:
        raise StateError(f"{name}: damaged series array ({exc})") from None
    if rows.ndim != 2 or rows.shape[1] != st.SeriesBuffer.WIDTH:
        raise StateError(f"{name}: damaged series array (shape {rows.shape})")
    return SavedState(name, doc, rows.astype(np.float64, copy=False))


def read(path: str) -> SavedState:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise StateError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return load(data, path)


def build(saved: SavedState, engine: Engine, offset: int = 0) -> st.ScanResult:
    """The rule state of a saved state, its file ids shifted by `offset` (its first file's
    place among the merged files). StateError when the state is damaged."""
    try:
        return _build(saved.doc, saved.rows, engine, offset)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StateError(
            f"{saved.name}: damaged scan state ({type(exc).__name__}: {exc})"
        ) from None


def _build(doc: dict[str, Any], rows: np.ndarray, engine: Engine, offset: int) -> st.ScanResult:
    runs = engine.new_runs()
    by_id = {run.rule.id: run for run in runs}
    names = [str(item["name"]) for item in doc["files"]]
    for saved in doc["rules"]:
        run = by_id[saved["id"]]
        for name, found in saved["matchers"].items():
            run.matchers[name] = _matcher(found, names, offset)
    start = 0
    for saved in doc["series"]:
        target = by_id[saved["rule"]].series[saved["name"]]
        for item in saved["buffers"]:
            buffer = st.SeriesBuffer()
            count = int(item["rows"])
            table = rows[start : start + count].copy()
            if len(table) != count:
                raise ValueError(f"series rows end early ({len(rows)} rows)")
            start += count
            table[:, 3] += offset
            buffer.append(table)
            buffer.offered = int(item["offered"])
            buffer.stride = int(item["stride"])
            buffer.outlier_stride = int(item["outlier_stride"])
            buffer.center = _unfloat(item["center"])
            buffer.spread = _unfloat(item["spread"])
            target[_unrank(item["rank"], offset)] = buffer
    result = st.ScanResult(
        runs,
        names,
        [Skipped(str(s["file"]), str(s["reason"]), bool(s["unread"])) for s in doc["skipped"]],
        {_unrank(rank, offset) for rank in doc["ranks_seen"]},
        int(doc["lines"]),
        int(doc["bytes"]),
        int(doc["unranked"]),
    )
    return result


def _matcher(found: dict[str, Any], names: list[str], offset: int) -> st.MatcherState:
    state = st.MatcherState()
    state.count = int(found["count"])
    state.rank_counts = {_unrank(rank, offset): int(count) for rank, count in found["rank_counts"]}
    state.evidence = [
        Evidence(
            names[int(e["file_id"])],
            int(e["line"]),
            str(e["text"]),
            _unrank(e["rank"], offset),
            str(e["part"]),
            _unfloat(e["t"]),
            int(e["offset"]),
            int(e["file_id"]) + offset,
        )
        for e in found["evidence"]
    ]
    state.first = {
        _unrank(rank, offset): FirstKey(_unfloat(t), int(file) + offset, int(line))
        for rank, t, file, line in found["first"]
    }
    state.columns = {
        name: [_unvalue(v) for v in values] for name, values in found["columns"].items()
    }
    if found["events"] is not None:
        state.events = [
            det.Event(
                _unrank(rank, offset),
                _unfloat(index),
                _unfloat(t),
                int(file) + offset,
                int(line),
                _unfloat(value),
                int(event_offset),
            )
            for rank, index, t, file, line, value, event_offset in found["events"]
        ]
    state.truncated = bool(found["truncated"])
    # (absent from the states of releases before traceback matchers: none was cut)
    state.cut = int(found.get("cut", 0))
    return state


# --- merging -----------------------------------------------------------------------------------


@dataclass
class Merged:
    """States merged in input order: the scan state, and per file the byte range read."""

    result: st.ScanResult
    ranges: list[tuple[int, int] | None]


def new_merge(engine: Engine) -> Merged:
    return Merged(st.ScanResult(engine.new_runs(), [], [], set(), 0, 0), [])


def check_digest(saved: SavedState, digest: str) -> None:
    if saved.digest != digest:
        raise StateError(
            f"{saved.name}: scanned with other rules (rules digest {saved.digest[:12]}, these "
            f"are {digest[:12]}); merge it with the rules, rule packs and --rule it was written with"
        )


def merge_into(merged: Merged, saved: SavedState, engine: Engine) -> None:
    """Fold one saved state after those merged so far. A state whose first file is the next
    byte range of the last file merged continues that file (a file scanned in parts)."""
    files, ranges = saved.files, saved.ranges
    continues = bool(
        files
        and merged.result.files
        and files[0] == merged.result.files[-1]
        and ranges[0] is not None
        and merged.ranges[-1] is not None
        and ranges[0][0] == merged.ranges[-1][1]
    )
    offset = len(merged.result.files) - (1 if continues else 0)
    part = build(saved, engine, offset)
    total = merged.result
    if continues:
        last = merged.ranges[-1]
        assert last is not None and ranges[0] is not None
        merged.ranges[-1] = (last[0], ranges[0][1])
        total.files.extend(part.files[1:])
        merged.ranges.extend(ranges[1:])
    else:
        total.files.extend(part.files)
        merged.ranges.extend(ranges)
    parallel.merge(
        total,
        parallel.Part(
            [(run.matchers, run.series) for run in part.runs],
            part.skipped,
            part.ranks_seen,
            part.lines,
            part.bytes,
        ),
        continues=continues,
    )
    total.unranked += part.unranked
    st.thin_series(total.runs, engine.series_budget)


def merge_saved(states: Iterable[SavedState], engine: Engine, digest: str) -> Merged:
    """Merge saved states in the order given (the input order of a serial scan)."""
    merged = new_merge(engine)
    for saved in states:
        try:
            check_digest(saved, digest)
            merge_into(merged, saved, engine)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # A file that has the format and version but not the fields (edited, or written
            # by something else): its name and what was wrong, not an internal error.
            raise StateError(
                f"{saved.name}: damaged scan state ({type(exc).__name__}: {exc})"
            ) from None
    return merged
