"""Recording matches into a rule's state: one recorder, `store`, for rows of lines in line order.

Rows (rows.py) are a `Batch` of a busy block's lines read through their shapes, or a `OneLine`
recorded on its own: a batch of one. Captures come as columns, one value per row, converted by
captures.convert_columns for both. What is recorded (counts, ranks, evidence, first lines,
columns, events, series points) is worked out once, here; only the series points of a batch of
many rows are added with numpy (feed_bulk, paired with feed_rows by a test).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainwreck.engine import state as st
from trainwreck.engine.captures import (
    Plan,
    column_numbers,
    convert_columns,
    number,
    numeric_captures,
)
from trainwreck.engine.detectors import Event
from trainwreck.engine.lineinfo import rank_number
from trainwreck.engine.matching import Line
from trainwreck.engine.rows import Batch, Columns, OneLine, Rows
from trainwreck.engine.state import (
    MAX_EVIDENCE_PER_MATCHER,
    MAX_ROWS,
    RuleRun,
    SeriesBuffer,
    UnrankedFile,
    series_key,
)
from trainwreck.findings import Evidence, FirstKey


def record(
    run: RuleRun,
    name: str,
    caps: dict[str, Any],
    line: Line,
    start: Evidence | None,
) -> None:
    """Record one match of a line recorded on its own (matching.Record): its captures, not yet
    converted, become columns of one row (`caps` is only read)."""
    state = run.matchers[name]
    if state.columns or state.events is not None or name in run.feeds or "rank" in caps:
        columns = convert_columns(run.plans[name], {key: [value] for key, value in caps.items()}, 1)
    else:
        columns = _UNREAD  # nothing reads this matcher's captures: none are converted
    store(run, name, columns, OneLine(line), None if start is None else (start,))


_UNREAD: Columns = {}  # (never written: store only reads columns)


def record_batch(users: list[Any], batch: Batch, runs: list[RuleRun]) -> None:
    """Record a batch of one pattern's lines for every matcher that uses the pattern (`users`:
    scanning.PatternUse): captures are read once (as arrays where every use reads them only as
    numbers), converted once per distinct plan, then stored."""
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
    numeric.discard("rank")  # a rank capture is read as its text (store)
    captured: dict[str, Any] = {}
    for name, group in users[0].groups:
        values = batch.values(group) if name in numeric else None
        captured[name] = values if values is not None else batch.captures(group)
    converted: dict[Plan, Columns] = {}
    for user in users:
        run = runs[user.run_index]
        plan = run.plans[user.matcher]
        columns = converted.get(plan)
        if columns is None:
            columns = converted[plan] = convert_columns(plan, dict(captured), n)
        store(run, user.matcher, columns, batch)


def store(
    run: RuleRun,
    name: str,
    columns: Columns,
    rows: Rows,
    starts: Sequence[Evidence | None] | None = None,
) -> None:
    """Record the matches of a matcher on `rows`, in line order: counts per rank, evidence (up
    to MAX_EVIDENCE_PER_MATCHER), each rank's first line, captured columns and events (up to
    MAX_ROWS), series points. `columns` are converted captures (only read, so rules whose
    matchers convert alike share them); `starts`, per row, the evidence of the first line of a
    multi-line match (a block's start, a traceback's first frame), or None."""
    n = len(rows)
    if not n:
        return
    state = run.matchers[name]
    if "rank" in columns:
        rows = rows.with_ranks(_captured_ranks(state.rank_counts, columns["rank"], rows))
    if starts is not None:
        for i, start in enumerate(starts):
            if start is not None and start.rank is None:
                start.rank = rows.rank(i)
    before = state.count
    state.count += n
    counts = state.rank_counts
    first = state.first
    for rank, at, found in rows.first_seen():  # in first-seen order, as line by line
        counts[rank] = counts.get(rank, 0) + found
        if rank not in first:
            opened = starts[at] if starts is not None else None
            if opened is not None:
                first[rank] = FirstKey(opened.t, opened.file_id, opened.line)
            else:
                first[rank] = FirstKey(rows.t(at), rows.file, rows.number(at))
    evidence = state.evidence
    for i in range(n):
        if len(evidence) >= MAX_EVIDENCE_PER_MATCHER:
            break
        if starts is not None and starts[i] is not None:
            evidence.append(starts[i])  # type: ignore[arg-type]
        evidence.append(rows.evidence(i, name))
    if state.columns:
        keep = max(0, min(n, MAX_ROWS - before))
        for column, values in state.columns.items():
            found_values = columns.get(column)
            if isinstance(found_values, np.ndarray):
                found_values = found_values[:keep].tolist()
            values.extend(found_values[:keep] if found_values is not None else [None] * keep)
        if before + n > MAX_ROWS:
            state.truncated = True
    if state.events is not None:
        taken = min(max(MAX_ROWS - len(state.events), 0), n)
        if taken:
            steps = columns.get("step")
            if isinstance(steps, np.ndarray):
                steps = steps.tolist()
            ranks, times, numbers, offsets = rows.head(taken)
            file_id = rows.file
            for i in range(taken):
                state.events.append(
                    Event(
                        ranks[i],
                        number(steps[i] if steps is not None else None),
                        times[i],
                        file_id,
                        numbers[i],
                        offset=offsets[i],
                    )
                )
    feeds = run.feeds.get(name)
    if feeds:
        if isinstance(rows, Batch) and n > 1:
            feed_bulk(run, feeds, columns, rows)
        else:
            feed_rows(run, feeds, columns, rows)


def _captured_ranks(seen: dict[Any, int], values: Sequence[Any], rows: Rows) -> list[Any]:
    """Each row's rank where a 'rank' capture names one: its digits, unless it would be a new
    rank past MAX_RANKS (then the line's own, bounded, rank stays). Row by row, as the ranks
    counted so far grow."""
    ranks: list[Any] = []
    new: set[Any] = set()
    for i in range(len(rows)):
        rank = rows.rank(i)
        value = values[i]
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            named = rank_number(value)
            if named is not None and (
                named in seen or named in new or len(seen) + len(new) < st.MAX_RANKS
            ):
                rank = named
        if rank not in seen:
            new.add(rank)
        ranks.append(rank)
    return ranks


def feed_rows(
    run: RuleRun, feeds: list[tuple[str, str, str | None]], columns: Columns, rows: Rows
) -> None:
    """The series points of rows, row by row (SeriesBuffer.add): each finite value in line
    order, into its rank's buffer (created at its first finite value). feed_bulk does the same
    with numpy, for batches of many rows (tests/test_rules_store.py pairs the two)."""
    file_id = rows.file
    wanted = [
        (run.series[series], columns.get(value), index, columns.get(index) if index else None)
        for series, value, index in feeds
    ]
    for i in range(len(rows)):
        key: Any = None  # the row's series key, time, number and offset, read on first need
        for per_rank, values, index_name, indexes in wanted:
            value = values[i] if values is not None else None
            if value.__class__ is not float:
                value = number(value)
            if value != value or value in (math.inf, -math.inf):
                continue
            if key is None:
                rank = rows.rank(i)
                key = rank if rank is not None else UnrankedFile(file_id)
                t, line, offset = rows.t(i), rows.number(i), rows.offset(i)
            buffer = per_rank.get(key)
            if buffer is None:
                buffer = per_rank[key] = SeriesBuffer()
            if index_name:
                index = indexes[i] if indexes is not None else None
                if index.__class__ is not float:
                    index = number(index)
            else:
                index = float(buffer.offered)
            buffer.add(value, index, t, file_id, line, offset)


_FEW = 8  # points of one rank in a batch below which they are appended without numpy


def feed_bulk(
    run: RuleRun,
    feeds: list[tuple[str, str, str | None]],
    columns: Columns,
    batch: Batch,
) -> None:
    """feed_rows for a batch of many rows, with numpy: per series, each rank's finite values in
    line order (a rank's buffer is created at its first finite value), those a thinned buffer
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
