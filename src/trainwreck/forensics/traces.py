"""A rank's dump as compact arrays, the shape the analysis aligns across thousands of ranks.

A full `Record` per entry would hold 8 million objects for 4096 ranks of 2000 entries; a trace
keeps, per process group, numpy arrays of the collectives' sequence ids, interned signatures,
creation times and record ids, plus full `Record`s only for the last few collectives and for
the p2p ops (which are matched pair by pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwreck.forensics.dumps import Dump, GroupStatus, Record, _int

TAIL = 3  # last collectives kept as full records per group (what a culprit was last doing)


class Signatures:
    """Interns (op, sizes, dtypes) of collectives across every rank: equal ids, equal calls."""

    def __init__(self) -> None:
        self.ids: dict[tuple[Any, ...], int] = {}
        self.values: list[tuple[Any, ...]] = []

    def intern(self, key: tuple[Any, ...]) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.values)
            self.values.append(key)
        return found

    def describe(self, sig: int) -> str:
        op, in_sizes, out_sizes, in_dtypes, _ = self.values[sig]
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
    name = str(entry.get("profiling_name", ""))
    op = name.partition(":")[2].split(" ")[0] or name
    # repr of the nested lists: hashable, exact, and far cheaper than tuples of tuples.
    return (
        op,
        repr(entry.get("input_sizes")),
        repr(entry.get("output_sizes")),
        repr(entry.get("input_dtypes")),
        repr(entry.get("output_dtypes")),
    )


def trace(raw: dict[str, Any], dump: Dump, signatures: Signatures) -> RankTrace:
    """The compact trace of a dump's raw mapping (`dump` carries its header, already typed)."""
    assert dump.rank is not None
    entries = raw.get("entries")
    per_group: dict[str, list[dict[str, Any]]] = {}
    p2p: list[Record] = []
    bad = 0
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            bad += 1
            continue
        if entry.get("is_p2p"):
            p2p.append(Record.from_dict(entry))
            continue
        group = entry.get("process_group")
        key = (
            str(group[0])
            if isinstance(group, (list, tuple)) and group
            else str(entry.get("pg_id", ""))
        )
        per_group.setdefault(key, []).append(entry)
    result = RankTrace(
        dump.file,
        dump.kind,
        dump.rank,
        dump.version,
        dump.group_ranks,
        p2p=tuple(p2p),
        bad_entries=bad,
    )
    for key, items in per_group.items():
        items.sort(key=lambda e: _int(e.get("collective_seq_id")))
        first = Record.from_dict(items[-1])
        status = dump.status.get(first.pg_id, GroupStatus(-1, -1, -1))
        result.groups[key] = GroupTrace(
            name=key,
            desc=first.pg_desc,
            pg_id=first.pg_id,
            seqs=np.fromiter(
                (_int(e.get("collective_seq_id")) for e in items), np.int64, len(items)
            ),
            sigs=np.fromiter(
                (signatures.intern(_signature(e)) for e in items), np.int32, len(items)
            ),
            times=np.fromiter(
                (_int(e.get("time_created_ns"), 0) for e in items), np.int64, len(items)
            ),
            record_ids=np.fromiter((_int(e.get("record_id")) for e in items), np.int64, len(items)),
            status=status,
            tail=tuple(Record.from_dict(e) for e in items[-TAIL:]),
            started_not_done=tuple(
                _int(e.get("collective_seq_id"))
                for e in items[-TAIL:]
                if e.get("state") == "started"
                and _int(e.get("collective_seq_id")) > status.completed
            ),
        )
    return result
