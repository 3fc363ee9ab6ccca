"""A rank's dump as compact arrays, the shape the analysis aligns across thousands of ranks.

A full `Record` per entry would hold 8 million objects for 4096 ranks of 2000 entries; a trace
keeps, per process group, numpy arrays of the collectives' sequence ids, interned signatures,
creation times and record ids, plus full `Record`s only for the last few collectives and for
the p2p ops (which are matched pair by pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from trainwreck.forensics import fastread
from trainwreck.forensics.dumps import Dump, GroupStatus, Record, _int, load_bytes

TAIL = 3  # last collectives kept as full records per group (what a culprit was last doing)
_GROUP_FIELD = itemgetter("process_group")
_P2P_FIELD = itemgetter("is_p2p")
_SIGNATURE_FIELDS = itemgetter(
    "profiling_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes"
)


@dataclass
class _Reference:
    """The first rank read of a group: its sequence ids, raw signature fields and their ids.
    The next rank that holds the same ids with equal fields (the usual case: every rank ran
    the same collectives) reuses its ids after one C-level list comparison, instead of a repr
    of every entry's sizes and dtypes (4 of the 30 s budget at 4096 ranks)."""

    seqs: np.ndarray
    fields: list[tuple[Any, ...]] | None  # None: made by trace_segments (no raw fields)
    sigs: np.ndarray


class Signatures:
    """Interns (op, sizes, dtypes) of collectives across every rank: equal ids, equal calls."""

    def __init__(self) -> None:
        # key -> id, filled with ids.setdefault(key, len(ids)) in traces._columns
        self.ids: dict[tuple[Any, ...], int] = {}
        self._values: list[tuple[Any, ...]] = []
        self.references: dict[str, _Reference] = {}  # by group name

    def value(self, sig: int) -> tuple[str, str, str, str, str]:
        """(op, input sizes, output sizes, input dtypes, output dtypes) of an id."""
        if len(self._values) != len(self.ids):
            self._values = sorted(self.ids, key=self.ids.__getitem__)
        name, *rest = self._values[sig]
        return (name.partition(":")[2].split(" ")[0] or name, *rest)  # type: ignore[return-value]

    def describe(self, sig: int) -> str:
        op, in_sizes, out_sizes, in_dtypes, _ = self.value(sig)
        return f"{op} in {in_sizes} {in_dtypes} out {out_sizes}"


@dataclass
class GroupTrace:
    """One rank's collectives on one process group, in sequence order."""

    name: str
    desc: str
    pg_id: int
    seqs: np.ndarray  # collective_seq_id, int64, ascending
    sigs: np.ndarray  # Signatures ids, int32
    times: np.ndarray  # time_created_ns, int64
    record_ids: np.ndarray  # int64
    status: GroupStatus
    tail: tuple[Record, ...]  # the last TAIL collectives
    started_not_done: tuple[int, ...] = ()  # seqs in state "started" and not completed

    @property
    def last_enqueued(self) -> int:
        held = int(self.seqs[-1]) if len(self.seqs) else -1
        return max(held, self.status.enqueued)

    @property
    def last_completed(self) -> int:
        return self.status.completed

    def record_at(self, seq: int) -> int | None:
        at = int(np.searchsorted(self.seqs, seq))
        return int(self.record_ids[at]) if at < len(self.seqs) and self.seqs[at] == seq else None

    def sig_at(self, seq: int) -> int | None:
        at = int(np.searchsorted(self.seqs, seq))
        return int(self.sigs[at]) if at < len(self.seqs) and self.seqs[at] == seq else None


@dataclass
class RankTrace:
    file: str
    kind: str
    rank: int
    version: str
    group_ranks: dict[str, tuple[int, ...]]
    groups: dict[str, GroupTrace] = field(default_factory=dict)
    p2p: tuple[Record, ...] = ()
    bad_entries: int = 0


def _signature(entry: dict[str, Any]) -> tuple[Any, ...]:
    """What ranks must agree on, as a hashable key: the profiling name (backend and op), and the
    reprs of the sizes and dtypes (exact, and far cheaper than tuples of tuples)."""
    return (
        str(entry.get("profiling_name", "")),
        repr(entry.get("input_sizes")),
        repr(entry.get("output_sizes")),
        repr(entry.get("input_dtypes")),
        repr(entry.get("output_dtypes")),
    )


def _fast_sigs(
    key: str, items: list[dict[str, Any]], seqs: np.ndarray, signatures: Signatures
) -> np.ndarray:
    """Signature ids of well-formed entries: the group's reference rank's ids when this rank
    holds the same sequence ids with equal fields, else one repr per entry."""
    fields = list(map(_SIGNATURE_FIELDS, items))
    reference = signatures.references.get(key)
    if (
        reference is not None
        and reference.fields is not None
        and np.array_equal(reference.seqs, seqs)
        and fields == reference.fields
    ):
        return reference.sigs  # shared, read-only
    table = signatures.ids
    keys = (
        (name if type(name) is str else str(name), repr(a), repr(b), repr(c), repr(d))
        for name, a, b, c, d in fields
    )
    sigs = np.array([table.setdefault(k, len(table)) for k in keys], np.int32)
    if reference is None:
        sigs.flags.writeable = False
        signatures.references[key] = _Reference(seqs, fields, sigs)
    return sigs


def _int64(value: Any, default: int = -1) -> int:
    """_int, and the default for a number no int64 column holds (a corrupt dump's 2**70)."""
    number = _int(value, default)
    return number if -(1 << 63) <= number < 1 << 63 else default


def _columns(
    key: str, items: list[dict[str, Any]], signatures: Signatures
) -> tuple[np.ndarray, ...]:
    """(seqs, sigs, times, record ids) of a group's entries. The fast path reads the fields of
    well-formed entries with C-level loops (4096 ranks x 2000 entries); any odd entry sends the
    whole group through the checked path, field by field."""
    table = signatures.ids
    try:
        seqs = np.array([e["collective_seq_id"] for e in items], np.int64)
        times = np.array([e["time_created_ns"] or 0 for e in items], np.int64)
        record_ids = np.array([e["record_id"] for e in items], np.int64)
        sigs = _fast_sigs(key, items, seqs, signatures)
    except (KeyError, TypeError, ValueError, OverflowError):
        seqs = np.array([_int64(e.get("collective_seq_id")) for e in items], np.int64)
        times = np.array([_int64(e.get("time_created_ns"), 0) for e in items], np.int64)
        record_ids = np.array([_int64(e.get("record_id")) for e in items], np.int64)
        sigs = np.array([table.setdefault(_signature(e), len(table)) for e in items], np.int32)
    if len(seqs) > 1 and (np.diff(seqs) < 0).any():  # dumps list entries oldest first; just in case
        order = np.argsort(seqs, kind="stable")
        seqs, sigs, times, record_ids = seqs[order], sigs[order], times[order], record_ids[order]
        items[:] = [items[i] for i in order]
    return seqs, sigs, times, record_ids


def _one_group(entries: list[Any]) -> str | None:
    """The group's key when every entry is a collective record of one process group (the usual
    dump), found with C-level passes; None sends the dump through the entry-by-entry split."""
    try:
        groups = list(map(_GROUP_FIELD, entries))
        flags = list(map(_P2P_FIELD, entries))
    except (KeyError, TypeError):
        return None
    first = groups[0]
    if (
        not isinstance(first, (list, tuple))
        or not first
        or not first[0]  # unnamed groups are told apart by pg_id (_group_key)
        or groups.count(first) != len(groups)
        or any(flags)
    ):
        return None
    return str(first[0])


def _group_key(entry: dict[str, Any]) -> str:
    """The group an entry belongs to: its process group's name; by pg_id when it has none
    (torch 2.13 names the default group "" and, under TORCH_DISTRIBUTED_DEBUG=DETAIL, the
    wrapper's helper group "" too: one name, two groups with their own sequence ids)."""
    group = entry.get("process_group")
    name = str(group[0]) if isinstance(group, (list, tuple)) and group else ""
    return name or f"pg_id {entry.get('pg_id', '?')}"


def _split(entries: list[Any]) -> tuple[dict[str, list[dict[str, Any]]], list[Record]]:
    """Collective entries by process group, and the p2p ops as records."""
    per_group: dict[str, list[dict[str, Any]]] = {}
    p2p: list[Record] = []
    for entry in entries:
        if entry.get("is_p2p"):
            p2p.append(Record.from_dict(entry))
            continue
        key = _group_key(entry)
        items = per_group.get(key)
        if items is None:
            items = per_group[key] = []
        items.append(entry)
    return per_group, p2p


def trace(raw: dict[str, Any], dump: Dump, signatures: Signatures) -> RankTrace:
    """The compact trace of a dump's raw mapping (`dump` carries its header, already typed)."""
    assert dump.rank is not None
    entries = raw.get("entries")
    if isinstance(entries, fastread.Segments):
        fast = trace_segments(entries, dump, signatures)
        data = entries.data
        entries.release()
        if fast is not None:
            return fast
        raw = load_bytes(data, dump.file)  # what fastread cannot read exactly
        dump = Dump.from_dict(raw, dump.file, dump.kind, dump.rank, records=False)
        entries = raw.get("entries")
    entries = entries if isinstance(entries, list) else []
    good = entries if dump.bad_entries == 0 else [e for e in entries if isinstance(e, dict)]
    key = _one_group(good) if good else None
    per_group, p2p = ({key: list(good)}, []) if key is not None else _split(good)
    result = RankTrace(
        dump.file,
        dump.kind,
        dump.rank,
        dump.version,
        dump.group_ranks,
        p2p=tuple(p2p),
        bad_entries=len(entries) - len(good),
    )
    for key, items in per_group.items():
        seqs, sigs, times, record_ids = _columns(key, items, signatures)
        tail = tuple(Record.from_dict(e) for e in items[-TAIL:])
        result.groups[key] = _group(key, seqs, sigs, times, record_ids, tail, dump)
    return result


def _group(
    key: str,
    seqs: np.ndarray,
    sigs: np.ndarray,
    times: np.ndarray,
    record_ids: np.ndarray,
    tail: tuple[Record, ...],
    dump: Dump,
) -> GroupTrace:
    status = dump.status.get(tail[-1].pg_id, GroupStatus(-1, -1, -1))
    return GroupTrace(
        name=key,
        desc=tail[-1].pg_desc,
        pg_id=tail[-1].pg_id,
        seqs=seqs,
        sigs=sigs,
        times=times,
        record_ids=record_ids,
        status=status,
        tail=tail,
        started_not_done=tuple(
            r.collective_seq_id
            for r in tail
            if r.state == "started" and r.collective_seq_id > status.completed
        ),
    )


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _strict(value: Any, key: str) -> int:
    """A column value both old paths read the same way (an int; time may be None or absent);
    anything else sends the dump back to the C unpickler's path."""
    if value is None and key == "time_created_ns":
        return 0
    if type(value) is not int or not _INT64[0] <= value <= _INT64[1]:
        raise fastread._GiveUp(f"{key} is not a plain integer")
    return value


def trace_segments(
    segments: fastread.Segments, dump: Dump, signatures: Signatures
) -> RankTrace | None:
    """The trace of a dump read by fastread, equal to what `trace` makes of the plain mapping;
    None when the entries hold something only the per-entry path reads exactly (p2p ops,
    non-integer columns): the caller then reads the dump with SafeUnpickler."""
    assert dump.rank is not None
    try:
        return _trace_segments(segments, dump, signatures)
    except (fastread._GiveUp, KeyError, IndexError, TypeError, ValueError, OverflowError):
        return None


def _trace_segments(segments: fastread.Segments, dump: Dump, signatures: Signatures) -> RankTrace:
    reps: list[dict[str, Any]] = []  # entries read one by one, and each run's representatives
    rep_of: list[np.ndarray] = []
    where: list[np.ndarray] = []  # per entry: its segment, and its row in a run (-1: none)
    rows: list[np.ndarray] = []
    cols: dict[str, list[np.ndarray]] = {key: [] for key in fastread.COLUMN_KEYS}
    for at, item in enumerate(segments.items):
        if isinstance(item, fastread.Run):
            base = len(reps)
            reps.extend(item.reps)
            rep_of.append(item.combo + base)
            where.append(np.full(item.count, at, np.int64))
            rows.append(np.arange(item.count, dtype=np.int64))
            for key in fastread.COLUMN_KEYS:
                column = item.columns.get(key)
                if column is None:
                    column = np.array([_strict(r.get(key), key) for r in item.reps], np.int64)
                    column = column[item.combo]
                    if key != "time_created_ns" and any(key not in r for r in item.reps):
                        raise fastread._GiveUp(f"no {key}")
                cols[key].append(column)
        elif isinstance(item, dict):
            if any(key not in item for key in ("collective_seq_id", "record_id")):
                raise fastread._GiveUp("an entry without its ids")
            rep_of.append(np.array([len(reps)], np.int64))
            reps.append(item)
            where.append(np.array([at], np.int64))
            rows.append(np.array([-1], np.int64))
            for key in fastread.COLUMN_KEYS:
                cols[key].append(np.array([_strict(item.get(key), key)], np.int64))
    result = RankTrace(
        dump.file, dump.kind, dump.rank, dump.version, dump.group_ranks, bad_entries=segments.bad
    )
    if not reps:
        return result
    if any(r.get("is_p2p") for r in reps):
        raise fastread._GiveUp("p2p ops are matched entry by entry")
    rep = np.concatenate(rep_of)
    entry_at, entry_row = np.concatenate(where), np.concatenate(rows)
    seq_all, time_all, rid_all = (np.concatenate(cols[key]) for key in fastread.COLUMN_KEYS)
    keys = [_group_key(r) for r in reps]
    names = list(dict.fromkeys(keys))  # groups in the order their first entry comes
    group_of_rep = np.array([names.index(k) for k in keys], np.int64)
    group_all = group_of_rep[rep]
    one_group = len(names) == 1
    table = signatures.ids
    for number, key in enumerate(names):
        idx = np.arange(len(rep)) if one_group else np.flatnonzero(group_all == number)
        reps_g = rep[idx]
        used, first = np.unique(reps_g, return_index=True)
        sig_of = np.zeros(len(reps), np.int32)
        for r in used[np.argsort(first, kind="stable")]:  # ids in the order the old path gives
            sig_of[r] = table.setdefault(_signature(reps[r]), len(table))
        seqs, sigs = seq_all[idx], sig_of[reps_g]
        times, record_ids = time_all[idx], rid_all[idx]
        if len(seqs) > 1 and (np.diff(seqs) < 0).any():
            order = np.argsort(seqs, kind="stable")
            seqs, sigs, times, record_ids, idx = (
                seqs[order],
                sigs[order],
                times[order],
                record_ids[order],
                idx[order],
            )
        reference = signatures.references.get(key)
        if reference is None:
            sigs.flags.writeable = False
            signatures.references[key] = _Reference(seqs, None, sigs)
        elif np.array_equal(reference.seqs, seqs) and np.array_equal(reference.sigs, sigs):
            sigs = reference.sigs  # shared, read-only, as the old path does
        tail = []
        for i in idx[-TAIL:]:
            item = segments.items[int(entry_at[i])]
            tail.append(
                Record.from_dict(item.row(int(entry_row[i])) if entry_row[i] >= 0 else item)
            )
        result.groups[key] = _group(key, seqs, sigs, times, record_ids, tuple(tail), dump)
    return result
