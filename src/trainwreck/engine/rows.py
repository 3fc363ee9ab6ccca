"""The rows the recorder reads (store.store): lines to record, in line order.

Two kinds, one interface (`Rows`): a `Batch`, the lines of a busy block that one pattern matched,
read through their shapes (shapes.ShapeRows) with numpy; a `OneLine`, a line recorded on its own
(a sparse candidate, a JSON record, a block's end, a traceback), a batch of one. They differ only
in how a row's facts are read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwreck.engine.captures import NOT_DIGITS, decimal_layout, decimal_values
from trainwreck.engine.lineinfo import gather
from trainwreck.engine.matching import Line
from trainwreck.engine.reading import evidence_text
from trainwreck.findings import Evidence

Columns = dict[str, Any]  # capture -> one value per row (a list, or a float array)


class Rows:
    """Lines to record, in line order: what the recorder reads of each (`store`)."""

    __slots__ = ()

    file: int
    name: str

    def __len__(self) -> int:
        raise NotImplementedError

    def rank(self, i: int) -> Any:
        raise NotImplementedError

    def t(self, i: int) -> float:
        raise NotImplementedError

    def number(self, i: int) -> int:
        raise NotImplementedError

    def offset(self, i: int) -> int:
        raise NotImplementedError

    def evidence(self, i: int, part: str) -> Evidence:
        raise NotImplementedError

    def first_seen(self) -> list[tuple[Any, int, int]]:
        """(rank, its first row, its number of rows), ranks in the order they first appear."""
        raise NotImplementedError

    def head(self, k: int) -> tuple[list[Any], list[float], list[int], list[int]]:
        """The ranks, times, numbers and offsets of the first k rows, as lists."""
        raise NotImplementedError

    def with_ranks(self, ranks: list[Any]) -> Rows:
        """The same rows with these ranks (a 'rank' capture's, store)."""
        raise NotImplementedError


class OneLine(Rows):
    """A line recorded on its own: a batch of one, read from its `matching.Line` (whose time is
    parsed only when first read)."""

    __slots__ = ("_rank", "file", "line", "name")

    def __init__(self, line: Line, rank: Any = None, ranked: bool = False) -> None:
        self.line = line
        self.file = line.file
        self.name = line.name
        self._rank = rank if ranked else line.rank

    def __len__(self) -> int:
        return 1

    def rank(self, i: int) -> Any:
        return self._rank

    def t(self, i: int) -> float:
        return self.line.t

    def number(self, i: int) -> int:
        return self.line.number

    def offset(self, i: int) -> int:
        return self.line.offset

    def evidence(self, i: int, part: str) -> Evidence:
        return self.line.evidence(part, self._rank)

    def first_seen(self) -> list[tuple[Any, int, int]]:
        return [(self._rank, 0, 1)]

    def head(self, k: int) -> tuple[list[Any], list[float], list[int], list[int]]:
        if k < 1:
            return [], [], [], []
        line = self.line
        return [self._rank], [line.t], [line.number], [line.offset]

    def with_ranks(self, ranks: list[Any]) -> Rows:
        return OneLine(self.line, ranks[0], ranked=True)


class Batch(Rows):
    """Lines of one block that one pattern matched (built by shapes.ShapeRows): their numbers,
    offsets, ranks and times, where they are in `data`, and their captures' spans, the same for
    all the lines of one shape (`groups`: spans and the rows of that shape)."""

    __slots__ = (
        "_seen",
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
        seen: list[tuple[Any, int, int]] | None = None,
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
        # first_seen, once: every matcher using the pattern reads it (`seen`: worked out by the
        # caller for the same codes)
        self._seen = seen

    def __len__(self) -> int:
        return len(self.numbers)

    def rank(self, i: int) -> Any:
        return self.distinct[int(self.codes[i])]

    def first_seen(self) -> list[tuple[Any, int, int]]:
        if self._seen is None:
            self._seen = first_seen(self.distinct, self.codes)
        return self._seen

    def line(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.ends[i])]

    def t(self, i: int) -> float:
        return float(self.times[i])

    def number(self, i: int) -> int:
        return int(self.numbers[i])

    def offset(self, i: int) -> int:
        return int(self.offsets[i])

    def evidence(self, i: int, part: str) -> Evidence:
        return Evidence(
            self.name,
            int(self.numbers[i]),
            evidence_text(self.line(i)),
            self.rank(i),
            part,
            self.t(i),
            int(self.offsets[i]),
            self.file,
        )

    def head(self, k: int) -> tuple[list[Any], list[float], list[int], list[int]]:
        distinct = self.distinct
        return (
            [distinct[code] for code in self.codes[:k].tolist()],
            self.times[:k].tolist(),
            self.numbers[:k].tolist(),
            self.offsets[:k].tolist(),
        )

    def with_ranks(self, ranks: list[Any]) -> Rows:
        return Batch(
            self.file,
            self.name,
            self.numbers,
            self.offsets,
            rank_codes(ranks),
            self.data,
            self.starts,
            self.ends,
            self.times,
            self.groups,
        )

    def _columns(self, rows: np.ndarray, start: int, end: int) -> np.ndarray:
        """Bytes start..end of the lines `rows` (of one shape), as a (rows, end - start) array."""
        return gather(self._text, self.starts[rows], start, end)

    def captures(self, group: int) -> list[str | None]:
        """The text of capture `group` on every line (None where it did not take part): what
        captures.named reads on each line alone. A capture with no digit is the same on every
        line of a shape; the others of one shape are decoded in one call, one line of the
        joined text each (a newline, which no capture holds, ends each, so each decodes as it
        would alone)."""
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


_FEW_CODES = 16  # distinct codes up to which first_seen finds each one in a pass of its own


def first_seen(distinct: list[Any], codes: np.ndarray) -> list[tuple[Any, int, int]]:
    """(rank, its first row, its number of rows) of rows coded `codes` (positions in
    `distinct`), ranks in the order they first appear."""
    if len(distinct) <= _FEW_CODES:  # a few ranks (the common case): no sort
        counts = np.bincount(codes, minlength=len(distinct)).tolist()
        firsts = [
            (int(np.argmax(codes == code)), code) for code in range(len(distinct)) if counts[code]
        ]
        firsts.sort()
        return [(distinct[code], at, counts[code]) for at, code in firsts]
    found, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return [
        (distinct[code], at, count)
        for code, at, count in zip(
            found[order].tolist(), first[order].tolist(), counts[order].tolist(), strict=True
        )
    ]


def rank_codes(ranks: list[Any]) -> tuple[list[Any], np.ndarray]:
    """(the distinct ranks, each row's position among them)."""
    try:  # whole-number ranks (the common case): coded with numpy
        found, codes = np.unique(np.fromiter(ranks, np.int64, len(ranks)), return_inverse=True)
        return found.tolist(), codes
    except (TypeError, ValueError, OverflowError):  # None or a node name among them
        index: dict[Any, int] = {}
        codes = np.fromiter((index.setdefault(r, len(index)) for r in ranks), np.int64, len(ranks))
        return list(index), codes
