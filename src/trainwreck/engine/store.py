"""Recording matches into a rule's state: one line at a time (`store`), or a batch of lines that
one pattern alone matched in a block (`store_bulk`, the same results in the same order)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainwreck.engine import state as st
from trainwreck.engine.captures import (
    NOT_DIGITS,
    Plan,
    column_numbers,
    convert,
    convert_columns,
    decimal_layout,
    decimal_values,
    number,
    numeric_captures,
)
from trainwreck.engine.detectors import Event
from trainwreck.engine.lineinfo import gather, rank_number
from trainwreck.engine.matching import Line
from trainwreck.engine.reading import evidence_text
from trainwreck.engine.state import (
    MAX_EVIDENCE_PER_MATCHER,
    MAX_ROWS,
    RuleRun,
    SeriesBuffer,
    UnrankedFile,
    series_key,
)
from trainwreck.findings import Evidence, FirstKey


class Batch:
    """Lines of one block that one pattern matched, awaiting record_batch (built by
    shapes.ShapeRows): their numbers, offsets, ranks and times, where they are in `data`, and
    their captures' spans, the same for all the lines of one shape (`groups`: spans and the
    rows of that shape)."""

    __slots__ = (
        "_text",
        "codes",
        "data",
        "distinct",
        "ends",
        "file",
        "groups",
        "name",
        "numbers",
        "offsets",
        "starts",
        "times",
    )

    def __init__(
        self,
        file_id: int,
        name: str,
        numbers: np.ndarray,
        offsets: np.ndarray,
        ranks: tuple[list[Any], np.ndarray],
        data: bytes,
        starts: np.ndarray,
        ends: np.ndarray,
        times: np.ndarray,
        groups: list[tuple[Any, np.ndarray]],
    ) -> None:
        self.file = file_id
        self.name = name
        self.numbers = numbers
        self.offsets = offsets
        self.distinct, self.codes = ranks  # the ranks, and each line's position among them
        self.data = data
        self.starts = starts
        self.ends = ends
        self.times = times
        self.groups = groups
        self._text = np.frombuffer(data, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.numbers)

    def rank(self, i: int) -> Any:
        return self.distinct[int(self.codes[i])]

    def first_seen(self) -> list[tuple[Any, int, int]]:
        """(rank, its first line's row, its number of lines), ranks in the order they first
        appear."""
        found, first, counts = np.unique(self.codes, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        return [
            (self.distinct[code], at, count)
            for code, at, count in zip(
                found[order].tolist(), first[order].tolist(), counts[order].tolist(), strict=True
            )
        ]

    def line(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.ends[i])]

    def t(self, i: int) -> float:
        return float(self.times[i])

    def _columns(self, rows: np.ndarray, start: int, end: int) -> np.ndarray:
        """Bytes start..end of the lines `rows` (of one shape), as a (rows, end - start) array."""
        return gather(self._text, self.starts[rows], start, end)

    def captures(self, group: int) -> list[str | None]:
        """The text of capture `group` on every line (None where it did not take part). A
        capture with no digit is the same on every line of a shape; the others of one shape are
        decoded in one call, one line of the joined text each (a newline, which no capture
        holds, ends each, so each decodes as it would alone)."""
        n = len(self)
        out: Any = None
        for spans, rows in self.groups:
            start, end = spans[group]
            if start < 0:
                continue
            first = self.line(int(rows[0]))[start:end]
            if first.translate(None, NOT_DIGITS):  # some digit: line by line
                table = np.empty((len(rows), end - start + 1), dtype=np.uint8)
                table[:, :-1] = self._columns(rows, start, end)
                table[:, -1] = 10
                decoded: Any = table.tobytes().decode("utf-8", "replace").split("\n")[:-1]
            else:
                decoded = first.decode("utf-8", "replace")
                if len(rows) == n:
                    return [decoded] * n
            if len(rows) == n:
                return decoded  # type: ignore[no-any-return]
            if out is None:
                out = np.full(n, None, dtype=object)
            out[rows] = decoded
        return [None] * n if out is None else out.tolist()

    def values(self, group: int) -> np.ndarray | None:
        """Capture `group` as the float Python's float() reads from it, on every line, computed
        with numpy (captures.decimal_values); None unless it is a plain decimal number on every
        line."""
        out = np.empty(len(self))
        for spans, rows in self.groups:
            start, end = spans[group]
            if start < 0:
                return None
            layout = decimal_layout(self.line(int(rows[0]))[start:end])
            if layout is None:
                return None
            out[rows] = decimal_values(self._columns(rows, start, end), layout)
        return out


def record(
    run: RuleRun,
    name: str,
    caps: dict[str, Any],
    line: Line,
    start: Evidence | None,
) -> None:
    store(run, name, convert(run.plans[name], caps), line, start)


def store(
    run: RuleRun,
    name: str,
    caps: dict[str, Any],
    line: Line,
    start: Evidence | None,
) -> None:
    """Record one match of a matcher (captures already converted; `caps` is only read, so
    rules whose matchers convert alike share one dict)."""
    # The hot path for series lines: plain locals, no per-call lookups of the rule's spec.
    rank = line.rank
    state = run.matchers[name]
    if "rank" in caps:
        value = caps["rank"]
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            named = rank_number(value)
            # a new rank past the cap keeps the line's own (bounded) rank
            if named is not None and (
                named in state.rank_counts or len(state.rank_counts) < st.MAX_RANKS
            ):
                rank = named
    state.count += 1
    counts = state.rank_counts
    counts[rank] = counts.get(rank, 0) + 1
    if start is not None and start.rank is None:
        start.rank = rank
    if len(state.evidence) < MAX_EVIDENCE_PER_MATCHER:
        if start is not None:
            state.evidence.append(start)
        state.evidence.append(
            Evidence(
                line.name, line.number, line.text(), rank, name, line.t, line.offset, line.file
            )
        )
    if rank not in state.first:
        if start is not None:
            state.first[rank] = FirstKey(start.t, start.file_id, start.line)
        else:
            state.first[rank] = FirstKey(line.t, line.file, line.number)
    if state.columns:
        if state.count <= MAX_ROWS:
            for column, values in state.columns.items():
                values.append(caps.get(column))
        else:
            state.truncated = True
    if state.events is not None and len(state.events) < MAX_ROWS:
        state.events.append(
            Event(
                rank, number(caps.get("step")), line.t, line.file, line.number, offset=line.offset
            )
        )
    feeds = run.feeds.get(name)
    if feeds:
        for series, value_name, index_name in feeds:
            value = caps.get(value_name)
            if value.__class__ is not float:
                value = number(value)
            if value != value or value in (math.inf, -math.inf):
                continue
            per_rank = run.series[series]
            key = rank if rank is not None else UnrankedFile(line.file)
            buffer = per_rank.get(key)
            if buffer is None:
                buffer = per_rank[key] = SeriesBuffer()
            if index_name:
                index = caps.get(index_name)
                if index.__class__ is not float:
                    index = number(index)
            else:
                index = float(buffer.offered)
            buffer.add(value, index, line.t, line.file, line.number, line.offset)


def record_batch(users: list[Any], batch: Batch, runs: list[RuleRun]) -> None:
    """Record a batch of one pattern's lines for every matcher that uses the pattern (`users`:
    scanning.PatternUse): captures are read once (as arrays where every use reads them only as
    numbers), converted once per distinct plan, then stored (store_bulk)."""
    n = len(batch)
    if not n:
        return
    numeric = numeric_captures(
        [
            (
                runs[user.run_index].plans[user.matcher],
                runs[user.run_index].matchers[user.matcher].columns,
            )
            for user in users
        ],
        [name for name, _ in users[0].groups],
    )
    captured: dict[str, Any] = {}
    for name, group in users[0].groups:
        values = batch.values(group) if name in numeric else None
        captured[name] = values if values is not None else batch.captures(group)
    converted: dict[Plan, dict[str, list[Any]]] = {}
    for user in users:
        run = runs[user.run_index]
        plan = run.plans[user.matcher]
        columns = converted.get(plan)
        if columns is None:
            columns = converted[plan] = convert_columns(plan, dict(captured), n)
        store_bulk(run, user.matcher, columns, batch)


def store_bulk(run: RuleRun, name: str, columns: dict[str, list[Any]], batch: Batch) -> None:
    """store() for every line of a batch (no rank capture, no block start): the same
    counts, evidence, first lines, columns, events and series points, in line order."""
    n = len(batch)
    file_id = batch.file
    numbers, offsets = batch.numbers, batch.offsets
    state = run.matchers[name]
    before = state.count
    state.count += n
    counts = state.rank_counts
    first = state.first
    for rank, at, found in batch.first_seen():  # in first-seen order, as line by line
        counts[rank] = counts.get(rank, 0) + found
        if rank not in first:
            first[rank] = FirstKey(batch.t(at), file_id, int(numbers[at]))
    room = MAX_EVIDENCE_PER_MATCHER - len(state.evidence)
    for i in range(min(max(room, 0), n)):
        state.evidence.append(
            Evidence(
                batch.name,
                int(numbers[i]),
                evidence_text(batch.line(i)),
                batch.rank(i),
                name,
                batch.t(i),
                int(offsets[i]),
                file_id,
            )
        )
    if state.columns:
        keep = max(0, min(n, MAX_ROWS - before))
        for column, values in state.columns.items():
            found = columns.get(column)
            if isinstance(found, np.ndarray):
                found = found[:keep].tolist()
            values.extend(found[:keep] if found is not None else [None] * keep)
        if before + n > MAX_ROWS:
            state.truncated = True
    if state.events is not None:
        steps = columns.get("step")
        if isinstance(steps, np.ndarray):
            steps = steps.tolist()
        taken = min(max(MAX_ROWS - len(state.events), 0), n)
        times = batch.times[:taken].tolist()
        line_numbers, line_offsets = numbers[:taken].tolist(), offsets[:taken].tolist()
        ranks = [batch.distinct[code] for code in batch.codes[:taken].tolist()]
        for i in range(taken):
            state.events.append(
                Event(
                    ranks[i],
                    number(steps[i] if steps is not None else None),
                    times[i],
                    file_id,
                    line_numbers[i],
                    offset=line_offsets[i],
                )
            )
    feeds = run.feeds.get(name)
    if feeds:
        feed_bulk(run, feeds, columns, batch)


_FEW = 8  # points of one rank in a batch below which they are appended without numpy


def feed_bulk(
    run: RuleRun,
    feeds: list[tuple[str, str, str | None]],
    columns: dict[str, list[Any]],
    batch: Batch,
) -> None:
    """The series points of a batch: per series, each rank's finite values in line order (a
    rank's buffer is created at its first finite value, as per line), those a thinned buffer
    keeps (SeriesBuffer.keeps)."""
    n = len(batch)
    distinct, codes = batch.distinct, batch.codes
    ranks = [series_key(rank, batch.file) for rank in distinct]
    numbers = np.asarray(batch.numbers, dtype=np.float64)
    offsets = np.asarray(batch.offsets, dtype=np.float64)
    # rows grouped by rank, in line order in each (a radix sort on small codes)
    by_rank = np.argsort(
        codes.astype(np.int16) if len(distinct) < 1 << 15 else codes, kind="stable"
    )
    times = batch.times
    for series, value_name, index_name in feeds:
        values = column_numbers(columns, value_name, n)
        keep = np.isfinite(values)
        if not keep.any():
            continue
        indexes = column_numbers(columns, index_name, n) if index_name else None
        rows = by_rank[keep[by_rank]]
        row_codes = codes[rows]
        starts = np.flatnonzero(np.diff(row_codes)) + 1
        bounds = [0, *starts.tolist(), len(rows)]
        per_rank = run.series[series]
        plain: tuple[list[Any], ...] | None = None  # the columns as lists, for small groups
        # Ranks in the order of their first finite value (buffers are created in that order).
        for at in np.argsort(rows[bounds[:-1]], kind="stable").tolist():
            low, high = bounds[at], bounds[at + 1]
            rank = ranks[int(row_codes[low])]
            buffer = per_rank.get(rank)
            if buffer is None:
                buffer = per_rank[rank] = SeriesBuffer()
            if high - low <= _FEW and buffer.stride == 1:
                # A rank with a few points here (many ranks, few lines each): appended from
                # lists, the same rows without numpy's cost per call.
                if plain is None:
                    plain = (
                        rows.tolist(),
                        values.tolist(),
                        None if indexes is None else indexes.tolist(),
                        times.tolist(),
                        numbers.tolist(),
                        offsets.tolist(),
                    )
                order, value_of, index_of, time_of, number_of, offset_of = plain
                file_value = float(batch.file)
                extend = buffer.rows.extend
                for k, row in enumerate(order[low:high]):
                    index = float(buffer.offered + k) if index_of is None else index_of[row]
                    extend(
                        (
                            value_of[row],
                            index,
                            time_of[row],
                            file_value,
                            number_of[row],
                            offset_of[row],
                            1.0,
                        )
                    )
                buffer.count += high - low
                buffer.offered += high - low
                continue
            picked = rows[low:high]
            if indexes is None:
                index = np.arange(buffer.offered, buffer.offered + high - low, dtype=np.float64)
            else:
                index = indexes[picked]
            value = values[picked]
            kept, sample = buffer.keeps(value, index, numbers[picked])
            if kept is not None:  # a thinned series: most points are left out first
                picked, value, index = picked[kept], value[kept], index[kept]
            table = np.empty((len(picked), SeriesBuffer.WIDTH), dtype=np.float64)
            table[:, 0] = value
            table[:, 1] = index
            table[:, 2] = times[picked]
            table[:, 3] = batch.file
            table[:, 4] = numbers[picked]
            table[:, 5] = offsets[picked]
            table[:, 6] = 1.0 if sample is None else sample
            buffer.append(table)
            buffer.offered += high - low
