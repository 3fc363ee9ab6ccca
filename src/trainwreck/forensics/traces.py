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

from trainwreck.forensics.dumps import Dump, GroupStatus, Record, _int

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
    fields: list[tuple[Any, ...]]
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
        seqs = np.array([_int(e.get("collective_seq_id")) for e in items], np.int64)
        times = np.array([_int(e.get("time_created_ns"), 0) for e in items], np.int64)
        record_ids = np.array([_int(e.get("record_id")) for e in items], np.int64)
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
        status = dump.status.get(tail[-1].pg_id, GroupStatus(-1, -1, -1))
        result.groups[key] = GroupTrace(
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
    return result
