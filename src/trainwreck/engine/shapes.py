"""Line shapes: what the lines of a busy block have in common, worked out once per shape.

A line's shape is the line with every ASCII digit turned into '0'. The step lines of a long run
differ only in their numbers, so a block of 40,000 of them has a handful of shapes. Everything
the engine does to a line before it records a match is blind to which digit stands where:
- the paste-shape prefixes (prefixes.split_spans) and the inline rank words tell digits apart only
  by '\\d' and by digit counts;
- the ISO and glog timestamp patterns (lineinfo.time_spans) too;
- most rule patterns too: regexes.digit_blind proves it, pattern by pattern, from the parse.

So for a shape the engine works out the line's facts once (facts.py, the functions the per-line
path uses), on the shape itself, and keeps where things are: where the message starts and ends,
where the rank is, where the timestamp's fields are, which patterns match and their group spans.
The shape is only the key they are kept under. Every other line of that shape is then read by
slicing its own bytes at those offsets: the same rank, captures and time the per-line path would
find, without running a prefix or a pattern again (tests/test_diagnose_bulk.py compares the two
on every regression log).

A pattern that reads digits ('Xid 79', '[1-9]\\d*') cannot be decided on the shape. Its required
literals, with their digits masked alike, are looked for in the shape instead: a line whose shape
lacks them cannot match it; a line whose shape has them goes the per-line way, as does a JSON
record and a line whose matches cannot be recorded in a batch (a block matcher, a 'rank' capture,
two patterns feeding one series).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import re2

from trainwreck.engine import lineinfo, prefixes
from trainwreck.engine.facts import Spans, facts_of, group_spans, inline_rank
from trainwreck.engine.lineinfo import gather
from trainwreck.engine.rows import Batch, first_seen, rank_codes
from trainwreck.engine.state import FileScan, ScanResult
from trainwreck.rules import regexes
from trainwreck.rules.regex_internals import UNANCHORED, raw_regex

MASK = lineinfo.DIGIT_MASK
_MASK_TEXT = str.maketrans("123456789", "000000000")
MAX_SHAPES = 16_384  # shapes remembered per engine (a few MiB); past it, shapes are not kept
MAX_SHAPE_LINE = 4096  # longer lines go the per-line way (they rarely repeat a shape)


@dataclass(frozen=True, slots=True, eq=False)  # shapes are compared by identity
class Shape:
    """What the lines of one shape hold, as offsets into the line."""

    key: int  # tells shapes apart within a block; below 0: the per-line path decides
    admits: bool = False  # some pattern matches: the line's rank is admitted
    rank: prefixes.RankSpan | None = None  # named by a prefix
    inline: tuple[int, int] | None = None  # else the digits of an inline 'rank N'
    hits: tuple[tuple[int, Spans], ...] = ()  # (pattern index, its group spans in the line)
    time: lineinfo.TimeSpans | None = None  # where the timestamp's fields are
    feeds: tuple[tuple[tuple[int, str], int], ...] = ()  # (series, pattern feeding it)

    @property
    def general(self) -> bool:
        """Whether the per-line path decides lines of this shape (GENERAL, JSON)."""
        return self.key < 0

    def rank_in(self, raw: bytes, file_rank: Any) -> Any:
        """The rank of a line of this shape, as the per-line path reads it."""
        if self.rank is not None:
            named = prefixes.rank_of(raw, self.rank)
            return lineinfo.rank_number(named) if isinstance(named, int) else named
        if self.inline is not None:
            start, end = self.inline
            return lineinfo.rank_number(raw[start:end])
        return file_rank


GENERAL = Shape(-1)  # lines no shape decides
JSON = Shape(-2)  # JSON records (the per-line path parses them)
UNKNOWN = -3  # ShapeBook.key_of's answer for a shape not known yet (no Shape has it)
UNKNOWN_AT = -UNKNOWN  # where ShapeBook.admits_table starts (the table is indexed by key + 3)


class ShapeBook:
    """The shapes seen by one engine, and what it needs to work out a new one."""

    def __init__(
        self,
        patterns: list[str],
        users: list[list[Any]],
        pattern_set: Any,
        bulk: list[bool],
        feeds: list[frozenset[tuple[int, str]]],
        json_lines: bool,
    ) -> None:
        self.users = users
        self.set = pattern_set
        self.bulk = bulk
        self.feeds = feeds
        self.json_lines = json_lines
        self.patterns = patterns
        # Worked out with the first shape (a log that never gets busy never pays for them).
        self.blind: list[bool] = []
        self.digit_literals: Any = None
        self.known: dict[bytes, Shape] = {}
        self.key_of: dict[bytes, int] = {}  # the known shapes' keys (a busy block maps them in C)
        self.by_key: dict[int, Shape] = {GENERAL.key: GENERAL, JSON.key: JSON}  # the known
        self._keys = 0
        self._admits: np.ndarray | None = None  # admits_table, until a shape is added

    @property
    def full(self) -> bool:
        """No more shapes are remembered (new ones are worked out for each line)."""
        return len(self.known) >= MAX_SHAPES

    def shape_of(self, raw: bytes) -> Shape:
        """The shape of `raw` (a line of at most MAX_SHAPE_LINE bytes, no CR), worked out on
        first sight."""
        masked = raw.translate(MASK)
        found = self.known.get(masked)
        if found is None:
            found = self._work_out(masked)
            if not self.full:
                self.known[masked] = found
                self.key_of[masked] = found.key
                self.by_key[found.key] = found
                self._admits = None
        return found

    def admits_table(self) -> np.ndarray:
        """Whether each known shape admits its lines (Shape.admits), by key + UNKNOWN_AT:
        position 0 is an unknown shape's (UNKNOWN), 1 and 2 JSON's and GENERAL's (False)."""
        if self._admits is None:
            table = np.zeros(self._keys + UNKNOWN_AT + 1, dtype=bool)
            for key, shape in self.by_key.items():
                table[key + UNKNOWN_AT] = shape.admits
            self._admits = table
        return self._admits

    def prepare(self) -> None:
        """Tell the patterns that read digits apart (on first need: a log that never gets busy
        never pays for it)."""
        if len(self.blind) != len(self.patterns):
            self.blind = [regexes.digit_blind(p) for p in self.patterns]
            self.digit_literals = _digit_literals(
                [p for p, blind in zip(self.patterns, self.blind, strict=True) if not blind]
            )

    def _work_out(self, masked: bytes) -> Shape:
        """The facts of the masked line (facts.py), kept as what every line of the shape holds;
        GENERAL when a pattern that reads digits may match, or when a match cannot be recorded
        in a batch."""
        self.prepare()
        facts = facts_of(self.set, masked, self.json_lines)
        if facts.record:
            return JSON
        literals = self.digit_literals
        if literals is not None and literals.Match(UNANCHORED, masked, 0, len(masked))[0][0] >= 0:
            return GENERAL  # a pattern that reads digits may match: the line decides
        start = facts.start
        body = facts.body(masked)
        hits: list[tuple[int, Spans]] = []
        fed: set[tuple[int, str]] = set()
        admits = False
        for index in facts.hits:
            if not self.blind[index]:
                continue  # its literals are not in the shape (above): no line of it matches
            admits = True
            if not self.bulk[index] or fed & self.feeds[index]:
                return GENERAL
            fed |= self.feeds[index]
            spans = group_spans(self.users[index][0].regex, body)
            if spans is None:
                continue
            hits.append(
                (index, tuple((a + start, b + start) if a >= 0 else (-1, -1) for a, b in spans))
            )
        inline = None
        if facts.rank is None and admits and (found := inline_rank(body)) is not None:
            inline = (found[0] + start, found[1] + start)
        self._keys += 1
        return Shape(
            self._keys,
            admits=admits,
            rank=facts.rank,
            inline=inline,
            hits=tuple(hits),
            time=lineinfo.time_spans(masked) if hits else None,
            feeds=tuple((series, index) for index, _ in hits for series in self.feeds[index]),
        )


def _digit_literals(patterns: list[str]) -> Any:
    """One RE2 search for the required literals of the patterns that read digits, with their
    digits masked, chained in pattern order as in the prefilter (regexes.prefilter_pattern).
    A pattern with no provable literal matches every shape (the empty chain)."""
    if not patterns:
        return None
    alternatives = []
    for pattern in patterns:
        options, ignore_case = regexes.literal_options(pattern)
        chain = regexes.literal_chain(options, ignore_case, lambda x: x.translate(_MASK_TEXT))
        alternatives.append(chain if options else "(?:)")
    opts = regexes.options()
    opts.never_capture = True
    opts.max_mem = 256 << 20
    try:
        return raw_regex(re2.compile("|".join(f"(?:{a})" for a in alternatives), opts))
    except Exception:  # too large for RE2: no shape decides a line (all go the per-line way)
        return raw_regex(re2.compile("", opts))


class ShapeRows:
    """Lines of a block read through their shapes, awaiting recording: the text they are in
    (`data`), where each starts and ends in it, its number, its offset in the file and its
    shape's key. Everything is read from `data` with numpy, shape by shape, at the shape's
    offsets: no Python runs per line."""

    __slots__ = ("data", "ends", "file", "keys", "numbers", "offsets", "shapes", "starts")

    def __init__(
        self,
        file_id: int,
        data: bytes,
        starts: np.ndarray,
        ends: np.ndarray,
        numbers: np.ndarray,
        offsets: np.ndarray,
        keys: np.ndarray,
        shapes: dict[int, Shape],
    ) -> None:
        self.file = file_id
        self.data = data
        self.starts = starts
        self.ends = ends
        self.numbers = numbers
        self.offsets = offsets
        self.keys = keys
        self.shapes = shapes  # key -> shape, for (at least) the keys here

    @classmethod
    def of_lines(
        cls,
        file_id: int,
        lines: list[bytes],
        numbers: list[int],
        offsets: list[int],
        shapes: list[Shape],
    ) -> ShapeRows:
        """Rows of separate lines (the prefilter's candidates), joined into one text."""
        lengths = np.fromiter(map(len, lines), np.int64, len(lines))
        ends = np.cumsum(lengths + 1) - 1
        return cls(
            file_id,
            b"\n".join(lines),
            ends - lengths,
            ends,
            np.asarray(numbers, dtype=np.int64),
            np.asarray(offsets, dtype=np.int64),
            np.fromiter(map(SHAPE_KEY, shapes), np.int64, len(shapes)),
            {shape.key: shape for shape in shapes},
        )

    def take(self, rows: np.ndarray) -> ShapeRows:
        return ShapeRows(
            self.file,
            self.data,
            self.starts[rows],
            self.ends[rows],
            self.numbers[rows],
            self.offsets[rows],
            self.keys[rows],
            self.shapes,
        )

    def series_apart(self) -> list[np.ndarray]:
        """The rows cut into runs (in order) within which every series takes points from one
        pattern only: the rows of one run are recorded pattern by pattern, and a series fed by
        two patterns must get its points in line order."""
        keys = self.keys
        feeding: dict[tuple[int, str], int] = {}
        if not any(
            feeding.setdefault(series, index) != index
            for key in np.unique(keys).tolist()
            for series, index in self.shapes[key].feeds
        ):
            return [np.arange(len(keys))]  # no series fed by two patterns here: one run
        changes = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        cuts = [0]
        feeding = {}
        for at in [0, *changes.tolist()]:
            feeds = self.shapes[int(keys[at])].feeds
            if any(feeding.get(series, index) != index for series, index in feeds):
                cuts.append(at)
                feeding = {}
            feeding.update(feeds)
        cuts.append(len(keys))
        return [np.arange(a, b) for a, b in pairwise(cuts) if b > a]

    def batches(self, scan: FileScan) -> Iterator[tuple[int, Batch]]:
        """Per pattern, the Batch of the rows it matched, in line order, with their ranks
        (admitted to `result` in line order, as line by line) and their times (read once for
        all patterns). Rows must be apart in their series (series_apart)."""
        n = len(self.keys)
        if not n:
            return
        keys = self.keys
        rows_of = _rows_of(keys)
        # the shapes in the order their first lines come
        distinct = {key: self.shapes[key] for key in sorted(rows_of, key=lambda k: rows_of[k][0])}
        text = np.frombuffer(self.data, dtype=np.uint8)
        coded = _rank_codes_known(self, text, rows_of, distinct, scan.result)
        if coded is not None:
            distinct_ranks, codes = coded
        else:
            ranks = _admitted(_ranks(self, text, rows_of, distinct, scan.rank), scan.result)
            distinct_ranks, codes = rank_codes(ranks)
        whole: list[tuple[Any, int, int]] | None = None  # first_seen of every row, once
        times = _times(self, text, rows_of, distinct)
        spans_of: dict[int, dict[int, Spans]] = {}
        for key, shape in distinct.items():
            for index, spans in shape.hits:
                spans_of.setdefault(index, {})[key] = spans
        for index in sorted(spans_of):
            of_key = spans_of[index]
            if len(of_key) == len(distinct):  # every row
                rows = None
                groups = [(of_key[key], rows_of[key]) for key in of_key]
                if whole is None:
                    whole = first_seen(distinct_ranks, codes)
            else:
                rows = np.flatnonzero(np.isin(keys, list(of_key)))
                groups = [
                    (spans, np.searchsorted(rows, rows_of[key])) for key, spans in of_key.items()
                ]
            yield (
                index,
                Batch(
                    self.file,
                    scan.name,
                    self.numbers if rows is None else self.numbers[rows],
                    self.offsets if rows is None else self.offsets[rows],
                    (distinct_ranks, codes if rows is None else codes[rows]),
                    self.data,
                    self.starts if rows is None else self.starts[rows],
                    self.ends if rows is None else self.ends[rows],
                    times if rows is None else times[rows],
                    groups,
                    whole if rows is None else None,
                ),
            )


def _rows_of(keys: np.ndarray) -> dict[int, np.ndarray]:
    """The rows of each key, in order: one sort, however many keys (not one pass per key)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    starts = [0, *cuts.tolist()]
    return dict(zip(ordered[starts].tolist(), np.split(order, cuts), strict=True))


SHAPE_KEY = operator.attrgetter("key")  # a shape's key, in C (Engine._scan_dense maps it per line)
SHAPE_ADMITS = operator.attrgetter("admits")


def _ranks(
    rows: ShapeRows,
    text: np.ndarray,
    rows_of: dict[int, np.ndarray],
    shapes: dict[int, Shape],
    file_rank: Any,
) -> list[Any]:
    """Every row's rank, as Shape.rank_in reads it; ranks written as digits (a prefix's, or an
    inline 'rank N' of at most MAX_RANK_DIGITS digits) are read with numpy."""
    ranks: list[Any] = [None] * len(rows.keys)
    for key, shape in shapes.items():
        where = rows_of[key]
        span = _rank_span(shape)
        if span is not None:
            digits = gather(text, rows.starts[where], span[0], span[1])
            found = lineinfo.digits_number(digits, 0, span[1] - span[0]).tolist()
        elif shape.rank is None and shape.inline is None:
            found = [file_rank] * len(where)
        else:
            data = rows.data
            found = [
                shape.rank_in(data[a:b], file_rank)
                for a, b in zip(rows.starts[where].tolist(), rows.ends[where].tolist(), strict=True)
            ]
        if len(where) == len(ranks):
            return found
        for i, rank in zip(where.tolist(), found, strict=True):
            ranks[i] = rank
    return ranks


_CODED_SPAN = 1 << 16  # ranks within this span of each other are coded by a table, not a sort


def _rank_codes_known(
    rows: ShapeRows,
    text: np.ndarray,
    rows_of: dict[int, np.ndarray],
    shapes: dict[int, Shape],
    result: ScanResult,
) -> tuple[list[int], np.ndarray] | None:
    """rank_codes(_admitted(_ranks(...))) with numpy, when every row's rank is written as digits
    at its shape's rank span (_ranks) and every one of them was admitted before (admitting
    changes nothing then): the ranks in order and each row's position among them. None
    otherwise (the caller reads them as a list)."""
    ranks = np.empty(len(rows.keys), dtype=np.int64)
    for key, shape in shapes.items():
        span = _rank_span(shape)
        if span is None:
            return None
        where = rows_of[key]
        digits = gather(text, rows.starts[where], span[0], span[1])
        ranks[where] = lineinfo.digits_number(digits, 0, span[1] - span[0])
    low = int(ranks.min())
    if int(ranks.max()) - low < _CODED_SPAN:
        present = np.bincount(ranks - low)
        found = np.flatnonzero(present)
        table = np.zeros(len(present), dtype=np.intp)
        table[found] = np.arange(len(found))
        codes = table[ranks - low]
        distinct = (found + low).tolist()
    else:
        unique, codes = np.unique(ranks, return_inverse=True)
        distinct = unique.tolist()
    if not result.ranks_seen.issuperset(distinct):
        return None  # a rank seen here first: admitted line by line (_admitted)
    return distinct, codes


def _rank_span(shape: Shape) -> tuple[int, int] | None:
    """Where the digits of the rank of a shape's lines are (a prefix's number, or an inline
    'rank N' of at most MAX_RANK_DIGITS digits); None when it is not written as digits there."""
    if shape.rank is not None and shape.rank[0] == "number":
        return shape.rank[1:]  # type: ignore[return-value]
    if shape.rank is None and shape.inline is not None:
        span = shape.inline
        if span[1] - span[0] <= lineinfo.MAX_RANK_DIGITS:
            return span
    return None


def _admitted(ranks: list[Any], result: ScanResult) -> list[Any]:
    """`ranks` through result.admit_rank, new ranks in the order they first appear (as line by
    line)."""
    kept = {rank: result.admit_rank(rank) for rank in dict.fromkeys(ranks)}
    refused = {rank for rank, got in kept.items() if got is None and rank is not None}
    if not refused:
        return ranks
    # Line by line, every line of a refused rank is counted, not only the first.
    result.unranked += sum(1 for rank in ranks if rank in refused) - len(refused)
    return [kept[rank] for rank in ranks]


def _times(
    rows: ShapeRows, text: np.ndarray, rows_of: dict[int, np.ndarray], shapes: dict[int, Shape]
) -> np.ndarray:
    """lineinfo.parse_time of every row, read at its shape's timestamp fields: computed with
    numpy for ISO stamps (the same integer calendar arithmetic and float steps as _iso_time),
    line by line otherwise."""
    times = np.full(len(rows.keys), np.nan)
    for key, shape in shapes.items():
        if shape.time is None:
            continue
        where = rows_of[key]
        starts = rows.starts[where]
        found = lineinfo.iso_times(text, starts, shape.time) if shape.time[0] else None
        if found is None:
            data = rows.data
            found = np.array(
                [
                    lineinfo.time_at(data[a:b], shape.time)
                    for a, b in zip(starts.tolist(), rows.ends[where].tolist(), strict=True)
                ]
            )
        times[where] = found
    return times
