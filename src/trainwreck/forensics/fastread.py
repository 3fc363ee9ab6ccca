"""A Flight Recorder pickle read without building its 2000 entry dicts (issue 24's speed target).

The C unpickler spends most of a dump's time building every entry's dict, and freeing it again,
for an analysis that reads four fields of most entries. But the entries one writer emits differ
only in their numbers: after the first one, torch's pickler (and Python's) writes every entry of
a rank with the same opcodes, the same memo references and the same strings; only the integer and
float payloads (sequence ids, timestamps, sizes, memo indices) change. So this reader:

- interprets the header and each entry it meets with a small data-only interpreter (containers,
  scalars, memo; no opcode that names or calls anything exists in it);
- after an entry, looks at the bytes that follow as rows of that entry's length and compares them
  with it, outside the payload bytes, in one numpy pass. A row that matches byte for byte outside
  the payloads is, opcode for opcode, the same entry with other numbers: a *run*;
- from a run it takes, vectorised, the payloads of the three columns the analysis aligns on
  (collective_seq_id, time_created_ns, record_id) and builds real dicts only for each distinct
  combination of the payloads the signature and the group key read, and later for the rows the
  report shows (a group's last entries).

Anything this reader does not handle the way the C unpickler would (an opcode outside its set, a
memo index reused or referring into a run, a truncated or odd stream, too many irregular entries)
makes it give up: `parse` returns None and the caller reads the bytes with `SafeUnpickler`, the
old path, which also words every error. So a dump is never read differently, only faster.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwreck.forensics.pickleops import (
    _NOTHING,
    _STARTS,
    _UNPACK_L,
    MAX_OPS,
    Interpreter,
    _GiveUp,
    _Slot,
)

COLUMN_KEYS = ("collective_seq_id", "time_created_ns", "record_id")
# The entry fields traces.trace_segments reads from a run's representative dicts.
READ_KEYS = (
    "profiling_name",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "process_group",
    "pg_id",
    "is_p2p",
)
MAX_WALKED = 64  # entries interpreted one by one before the C unpickler is cheaper
MAX_COMBOS = 64  # distinct signature payloads in one run
MIN_RUN = 2
_FIRST_ROWS = 16  # rows compared at once, doubling while they match


@dataclass
class Run:
    """`count` entries of `length` bytes from `start`, each the template's opcodes."""

    data: bytes
    start: int
    length: int
    count: int
    reps: list[dict[str, Any]]  # one real dict per distinct signature/group payload
    combo: np.ndarray  # per row, its index in reps
    columns: dict[str, np.ndarray]  # per row, COLUMN_KEYS that are a payload of their own
    reader: _Reader

    def row(self, k: int) -> dict[str, Any]:
        """Row k as the C unpickler would have built it (memo references resolve to the objects
        they named when the run was read: memo indices are never reused)."""
        at = self.start + k * self.length
        self.reader.ops = 0  # a row's opcodes are bounded by its length
        value = self.reader.value(at, at + self.length, write_memo=False)
        if not isinstance(value, dict):
            raise _GiveUp("a run row is not a dict")
        return value


@dataclass
class Segments:
    """The entries list, in order: entries interpreted one by one, and runs."""

    data: bytes
    items: list[Any] = field(default_factory=list)  # an entry (any object) or a Run
    bad: int = 0  # entries that are not dicts

    def release(self) -> None:
        """Drop the bytes and the memo: the memo can hold the top-level mapping, which holds
        these segments, a cycle that would keep every dump's bytes alive while gc is off."""
        for item in self.items:
            if isinstance(item, Run):
                item.reader.memo.clear()
        self.items.clear()
        self.data = b""

    def __len__(self) -> int:
        return sum(i.count if isinstance(i, Run) else 1 for i in self.items)


class _Reader(Interpreter):
    """The interpreter, plus the entries list read as runs."""

    # --- the entries list ----------------------------------------------------------------------

    def entries(self, at: int, segments: Segments) -> int:
        """The elements of the entries list from `at` (after its EMPTY_LIST and memo put):
        batches MARK ... APPENDS, or one element then APPEND."""
        data = self.data
        walked = 0
        while at < len(data):
            op = data[at]
            if op == 0x28:  # MARK: a batch
                at += 1
                while True:
                    if at >= len(data):
                        raise _GiveUp("truncated")
                    if data[at] == 0x65:  # APPENDS
                        at += 1
                        break
                    if data[at] not in _STARTS:
                        raise _GiveUp("odd entries batch")
                    walked += 1
                    if walked > MAX_WALKED:
                        raise _GiveUp("too irregular")
                    at = self._element(at, segments, in_batch=True)
            elif op in _STARTS:  # one element and APPEND, or the list ended and this is a key
                value = self.value(at)
                if data[self.end : self.end + 1] != b"a":
                    self.pending = value
                    return self.end
                segments.items.append(value)
                segments.bad += not isinstance(value, dict)
                at = self.end + 1
            else:
                return at
        raise _GiveUp("truncated")

    def _element(self, at: int, segments: Segments, in_batch: bool) -> int:
        value = self.value(at)
        end = self.end
        segments.items.append(value)
        if not isinstance(value, dict):
            segments.bad += 1
            return end
        run = self._run(at, end)
        if run is None:
            return end
        segments.items.append(run)
        return run.start + run.count * run.length

    def _run(self, start: int, end: int) -> Run | None:
        """The rows after the entry [start, end) that are that entry with other payloads."""
        length = end - start
        room = (len(self.data) - end) // length
        if room < MIN_RUN:
            return None
        slots: list[_Slot] = []
        self.slots = slots
        try:
            template = self.value(start, end, write_memo=False)
        finally:
            self.slots = None
        mask = np.full(length, 0xFF, np.uint8)
        for slot in slots:
            payload = slot.at + (2 if slot.kind == 0x8A else 1) - start
            mask[payload : payload + slot.width] = 0
        reference = np.frombuffer(self.data, np.uint8, length, start) & mask
        count = 0
        chunk = _FIRST_ROWS
        while count < room:
            take = min(chunk, room - count)
            rows = np.frombuffer(self.data, np.uint8, take * length, end + count * length)
            bad = ((rows.reshape(take, length) & mask) != reference).any(axis=1)
            first_bad = int(bad.argmax()) if bad.any() else take
            count += first_bad
            if first_bad < take:
                break
            chunk *= 2
        if count < MIN_RUN:
            return None
        rows = np.frombuffer(self.data, np.uint8, count * length, end).reshape(count, length)
        return self._columns(template, slots, rows, start, end, count)

    def _columns(
        self,
        template: dict[Any, Any],
        slots: list[_Slot],
        rows: np.ndarray,
        start: int,
        end: int,
        count: int,
    ) -> Run:
        direct = {id(template.get(key)): key for key in COLUMN_KEYS}
        columns: dict[str, np.ndarray] = {}
        wanted: set[int] = set()
        for key in READ_KEYS + COLUMN_KEYS:
            if key in template and not (key in COLUMN_KEYS and isinstance(template[key], _Slot)):
                wanted.update(_slot_ids(template[key]))
        if _any_slot_key(template):
            raise _GiveUp("a payload as a dict key")
        combo_bytes: list[int] = []
        puts: list[np.ndarray] = []
        memoizes = 0
        for slot in slots:
            at = slot.at - start + (2 if slot.kind == 0x8A else 1)
            if slot.kind in (0x71, 0x72):
                puts.append(_decode(rows, slot.kind, at, slot.width))
            elif slot.kind == 0x94:
                memoizes += 1
            elif id(slot) in direct:
                if slot.kind == 0x47:
                    raise _GiveUp("a float where the analysis wants an integer")
                columns[direct[id(slot)]] = _decode(rows, slot.kind, at, slot.width)
            elif id(slot) in wanted:
                combo_bytes.extend(range(at, at + slot.width))
        if puts and memoizes:
            raise _GiveUp("mixed memo puts")
        if puts:
            indices = np.stack(puts, axis=1).ravel()
            if indices[0] <= self.max_put or (len(indices) > 1 and (np.diff(indices) <= 0).any()):
                raise _GiveUp("memo indices do not rise")
            self.max_put = int(indices[-1])
            self.memo_count += len(indices)
        elif memoizes:
            if self.memo_count <= self.max_put:
                raise _GiveUp("memoize after a higher put")
            self.memo_count += memoizes * count
            self.max_put = self.memo_count - 1
        if combo_bytes:
            payload = np.ascontiguousarray(rows[:, combo_bytes])
            if (payload == payload[0]).all():
                firsts, combo = [0], np.zeros(count, np.intp)
            else:
                keyed = payload.view(np.dtype((np.void, payload.shape[1]))).ravel()
                _, firsts, combo = np.unique(keyed, return_index=True, return_inverse=True)
                if len(firsts) > MAX_COMBOS:
                    raise _GiveUp("too many distinct signatures in a run")
                firsts = list(firsts)
        else:
            firsts, combo = [0], np.zeros(count, np.intp)
        run = Run(self.data, end, end - start, count, [], combo.ravel(), columns, self)
        run.reps = [run.row(int(k)) for k in firsts]
        return run

    # --- the whole dump ------------------------------------------------------------------------

    def dump(self) -> tuple[dict[str, Any], Segments]:
        data = self.data
        stack: list[Any] = []
        marks: list[int] = []
        segments: Segments | None = None
        placeholder: list[Any] = []
        at = 0
        while True:
            if at >= len(data):
                raise _GiveUp("truncated")
            if self.ops > MAX_OPS:
                raise _GiveUp("too many opcodes")
            op = data[at]
            if op == 0x2E:  # STOP
                if marks or len(stack) != 1:
                    raise _GiveUp("stack at STOP")
                top = stack[0]
                if (
                    segments is None
                    or type(top) is not dict
                    or top.get("entries") is not placeholder
                ):
                    raise _GiveUp("not the usual dump")
                return top, segments
            if (
                op == 0x5D
                and marks == [1]
                and stack
                and type(stack[0]) is dict
                and len(stack) % 2 == 0
                and stack[-1] == "entries"
                and type(stack[-1]) is str
            ):
                if segments is not None:
                    raise _GiveUp("entries twice")
                segments = Segments(data)
                stack.append(placeholder)
                at += 1
                if data[at : at + 1] in (b"q", b"r", b"\x94"):  # the list's memo slot: unknown
                    width = {0x71: 2, 0x72: 5, 0x94: 1}[data[at]]
                    index = (
                        self.memo_count
                        if data[at] == 0x94
                        else data[at + 1]
                        if data[at] == 0x71
                        else _UNPACK_L(data, at + 1)[0]
                    )
                    if index <= self.max_put:
                        raise _GiveUp("memo index reused")
                    self.max_put, self.memo_count = index, self.memo_count + 1
                    at += width
                self.pending = _NOTHING
                at = self.entries(at, segments)
                if self.pending is not _NOTHING:  # the list ended; that value was the next key
                    stack.append(self.pending)
                continue
            at = self.step(at, stack, marks)


def _slot_ids(value: Any) -> set[int]:
    """ids of the _Slots inside a value (containers walked without recursion)."""
    found: set[int] = set()
    todo = [value]
    seen = 0
    while todo:
        item = todo.pop()
        seen += 1
        if seen > 10_000:
            raise _GiveUp("a field too large to compare")
        if isinstance(item, _Slot):
            found.add(id(item))
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
    return found


def _any_slot_key(value: Any) -> bool:
    todo = [value]
    seen = 0
    while todo:
        item = todo.pop()
        seen += 1
        if seen > 100_000:
            raise _GiveUp("an entry too large")
        if isinstance(item, dict):
            if any(isinstance(k, _Slot) for k in item):
                return True
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return False


def _decode(rows: np.ndarray, kind: int, at: int, width: int) -> np.ndarray:
    """A payload column as int64: BININT1/2 unsigned, BININT and LONG1 signed, little endian,
    BINPUT/LONG_BINPUT unsigned."""
    raw = np.ascontiguousarray(rows[:, at : at + width])
    if kind == 0x4A:
        return raw.view("<i4").ravel().astype(np.int64)
    if kind == 0x72:
        return raw.view("<u4").ravel().astype(np.int64)
    if kind == 0x8A:
        pad = np.where(raw[:, -1:] >= 0x80, 0xFF, 0).astype(np.uint8)
        full = np.concatenate([raw, np.repeat(pad, 8 - width, axis=1)], axis=1)
        return np.ascontiguousarray(full).view("<i8").ravel()
    value = raw[:, 0].astype(np.int64)
    if width == 2:
        value |= raw[:, 1].astype(np.int64) << 8
    return value


def parse(data: bytes) -> tuple[dict[str, Any], Segments] | None:
    """The dump's top-level mapping (its "entries" an empty list) and its entries as segments;
    None when this reader does not take the stream (then SafeUnpickler reads it)."""
    try:
        return _Reader(data).dump()
    except (_GiveUp, IndexError, KeyError, struct.error, ValueError, TypeError, RecursionError):
        return None
