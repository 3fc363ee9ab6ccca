"""Scanning: streams logs through the compiled rules in bounded memory.

How a log is read, and why it is fast:
- input is read in blocks of a few MiB, cut at line ends (reading.py); a line longer than
  MAX_LINE bytes is cut there (its tail is skipped, never buffered);
- one combined RE2 search over the block finds candidate lines: those that contain a literal that
  some pattern requires (or that the pattern itself could match, when no literal is provable);
  every other line costs only RE2's scan and a newline count;
- a candidate line is decoded, its rank prefix removed (lineinfo.py, prefixes.py), and one RE2
  set tells which patterns match; only those run again, for their captures;
- in a busy block, lines are read through their shape (shapes.py: the line with its digits
  masked), worked out once, and their matches are recorded per pattern in batches (a
  rows.Batch); a line read on its own is a batch of one (rows.OneLine): one recorder,
  store.store, records both;
- numbers go to per-rank series buffers; evidence lines are capped per matcher (state.py).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

import numpy as np

from trainwreck.engine import parallel, patterns, prefixes
from trainwreck.engine import state as st
from trainwreck.engine.lineinfo import (
    SAMPLE_PREFIX,
    rank_from_path,
    rank_number,
)
from trainwreck.engine.oneline import read_line
from trainwreck.engine.reading import MAX_LINE, ByteRange, open_input, read_blocks
from trainwreck.engine.shapes import (
    GENERAL,
    JSON,
    MASK,
    MAX_SHAPE_LINE,
    SHAPE_ADMITS,
    SHAPE_KEY,
    UNKNOWN,
    UNKNOWN_AT,
    Shape,
    ShapeBook,
    ShapeRows,
)
from trainwreck.engine.state import Cursor, FileScan, RuleRun, ScanResult
from trainwreck.engine.store import record as record_match
from trainwreck.engine.store import record_batch
from trainwreck.findings import Skipped
from trainwreck.rules.regex_internals import UNANCHORED
from trainwreck.rules.rule import RankHow, Rule

# Candidate lines in a block after which the rest of it is read through line shapes (shapes.py,
# Engine._scan_shapes): working out a few shapes then pays for itself.
BLOCK_SET_AFTER = 2000
BLOCK_SET_EARLY = 200  # ... or after this many when they are dense (one line in 20 or more)
# Shapes pay only when they repeat: working out a new one costs about what reading its line does.
# After this many lines of a block read through shapes, more than half of them of a shape not
# seen before, the rest of the block is read line by line, and so are the next SHAPELESS_BLOCKS
# blocks (a log whose every line differs, say random words, runs no slower than line by line).
STEP_ASIDE_AFTER = 256
SHAPELESS_BLOCKS = 8


SAMPLE_WINDOW = 65536  # the head of each block whose rank prefixes missing-from rules admit


def _may_name_ranks(block: bytes) -> bool:
    """Whether SAMPLE_PREFIX can match in the block's SAMPLE_WINDOW: it needs one of its two
    literals there (two memchr-speed searches instead of a regex tried at every line)."""
    return (
        block.find(b"[rank", 0, SAMPLE_WINDOW) >= 0
        or block.find(b"[default", 0, SAMPLE_WINDOW) >= 0
    )


class Engine:
    """The compiled rule set: every distinct pattern once, with the rules' matchers that use it,
    the prefilters, and the series that rules share."""

    def __init__(self, rules: Iterable[Rule | Mapping[str, Any]]):
        # (a bundle's mapping is read into its Rule; KeyError, ValueError or TypeError when
        # malformed)
        self.rules = [r if isinstance(r, Rule) else Rule.from_dict(r) for r in rules]
        rules = self.rules
        compiled = patterns.compile_patterns(rules)
        self.pattern_list = compiled.patterns
        self.users = compiled.users
        self.records = compiled.records
        self.record_literals = compiled.record_literals
        self.missing_from = any(
            rule.report.initiating_rank.how == RankHow.MISSING_FROM for rule in rules
        )
        self.shared_series = patterns.shared_series(rules)
        # Patterns whose every use is a plain regex matcher without a 'rank' capture can be
        # recorded in batches (_scan_shapes).
        self.bulk = [patterns.bulk_ok(rules, users_of) for users_of in self.users]
        self.set = patterns.pattern_set(self.pattern_list)
        self.shapes = ShapeBook(
            self.pattern_list,
            self.users,
            self.set,
            self.bulk,
            [patterns.series_fed(rules, users_of) for users_of in self.users],
            bool(self.records),
        )
        self.flushes = patterns.flushes(rules)
        self.prefilter: Any = None
        self.series_budget = st.SERIES_BUDGET  # a parallel worker holds its share of it
        self.prepared = False
        self._block_starts: Any = None

    def prepare(self, sample: bytes) -> None:
        """Choose the prefilter on a sample of the input (its first block: patterns.prefilters).
        Done by the first scan; a parallel scan does it before its workers fork, so that each
        does not do it again."""
        self.prefilter = patterns.prefilters(self.pattern_list, self.record_literals, sample)
        self.prepared = True

    def block_starts(self) -> list[tuple[int, Any]]:
        """Per span (the most lines a multi-line matcher spans), one RE2 search for every line
        that may open such a matcher (a block's start, a traceback's lines): the opening
        patterns' prefilters (parallel.no_open_block); empty without any."""
        if self._block_starts is None:
            found: dict[int, list[str]] = {}
            for rule in self.rules:
                for matcher in rule.matchers.values():
                    if (opens := matcher.opens()) is not None:
                        found.setdefault(opens[1], []).extend(opens[0])
            self._block_starts = [
                (span, patterns.any_of_prefilters(sorted(set(openers))))
                for span, openers in sorted(found.items())
            ]
        return self._block_starts

    def new_runs(self) -> list[RuleRun]:
        """Fresh state for every rule, with alike series shared (see __init__)."""
        runs = [RuleRun(rule) for rule in self.rules]
        for (index, name), (owner, owner_name) in self.shared_series.items():
            runs[index].series[name] = runs[owner].series[owner_name]
            for feeds in runs[index].feeds.values():
                feeds[:] = [feed for feed in feeds if feed[0] != name]
        return runs

    def scan(self, inputs: Iterable[tuple[str, Any]], jobs: int | None = None) -> ScanResult:
        """Scan inputs: (display name, path | "-" | binary stream). Several large files are
        scanned in parallel processes (`jobs`: None = automatic, 1 = serial)."""
        inputs = list(inputs)
        runs = self.new_runs()
        result = ScanResult(runs, [], [], set(), 0, 0)
        workers = parallel.workers(inputs, jobs)
        if workers > 1:
            parallel.scan_parallel(self, inputs, workers, result)
            return result
        for display, source in inputs:
            result.files.append(display)
            self.scan_range(source, display, len(result.files) - 1, into=result)
        return result

    def scan_range(
        self,
        source: Any,
        display: str,
        file_id: int = 0,
        part: tuple[int, int, int] | None = None,
        into: ScanResult | None = None,
    ) -> ScanResult:
        """Scan one input as the `file_id`-th input of a scan, into the state of `into` (fresh
        state when None): whole, or the byte range `part` = (start, end, number of the line at
        start) of a plain file, where a serial scan starts a block and no block matcher can be
        open (parallel.plan_parts; the caller samples the ranks of the range's blocks). A file
        that cannot be scanned is skipped with its reason (one bad file never ends the run); a
        part that fails raises, for the caller to report the file cut short there. The serial
        scan and the parallel workers both scan through it."""
        result = into if into is not None else ScanResult(self.new_runs(), [], [], set(), 0, 0)
        scan = FileScan(file_id, display, rank_from_path(display), result.runs, result)
        if scan.rank is not None:
            result.ranks_seen.add(scan.rank)
        try:
            self._scan_file(source, scan, part)
        except MemoryError:
            result.skipped.append(
                Skipped(display, "out of memory while reading; the rest was skipped")
            )
        except Exception as exc:
            if part is not None:
                raise
            result.skipped.append(
                Skipped(display, f"could not be scanned ({exc!r}); the rest was skipped")
            )
        return result

    def _scan_file(
        self, source: Any, scan: FileScan, part: tuple[int, int, int] | None = None
    ) -> None:
        """Scan one input; `part` = (start, end, number of the line at start) scans that byte
        range of a plain file (see scan_range)."""
        display, result = scan.name, scan.result
        handle = open_input(source, display, result.skipped)
        if handle is None:
            return
        cursor = Cursor(scan)
        unranked = result.unranked
        reader: Any = handle
        if part is not None:
            cursor.base, stop, cursor.line_no = part
            handle.seek(cursor.base)
            reader = ByteRange(handle, stop - cursor.base)
        first_line = cursor.line_no
        try:
            for block in read_blocks(
                reader, display, result.skipped, head=part is None or cursor.base == 0
            ):
                self._scan_block(block, cursor, sample_ranks=part is None)
            result.lines += cursor.line_no - first_line
            self._flush(scan, None)
        finally:
            if result.unranked > unranked:
                result.skipped.append(
                    Skipped(
                        display,
                        f"more than {st.MAX_RANKS:,} distinct ranks; lines of further ranks were "
                        "read with their rank unknown",
                    )
                )
            if handle is not sys.stdin.buffer:
                handle.close()

    def _scan_block(self, block: bytes, cursor: Cursor, sample_ranks: bool) -> None:
        """Scan one block of the input at the cursor, and move the cursor past it."""
        if not self.prepared:
            self.prepare(block[: 1 << 20])
        result = cursor.scan.result
        result.bytes += len(block)
        raw_length = len(block)
        # The paste-shape layer (prefixes.py): line numbers stay; a changed block is scanned
        # line by line and its byte offsets are mapped back to the raw block.
        newlines = prefixes.newlines_of(block)
        shaped = prefixes.normalize_block(block, newlines)
        cursor.enter(shaped, None if shaped is block else prefixes.line_starts(block))
        cursor.newlines = newlines if shaped is block else None
        if self.missing_from and sample_ranks and _may_name_ranks(shaped):
            hits = SAMPLE_PREFIX.findall(shaped, 0, SAMPLE_WINDOW)
            counts = Counter(hits)  # each rank once (a block names a few, many times)
            for hit, count in counts.items():
                rank = rank_number(hit)
                if rank is not None and result.admit_rank(rank) is None:
                    result.unranked += count - 1  # a refused rank counts every line
        if self.prefilter is not None:
            self._scan_candidates(cursor)
        cursor.count_to(len(shaped))
        cursor.base += raw_length
        if self.flushes:
            self._flush(cursor.scan, cursor.line_no)
        st.thin_series(cursor.scan.runs, self.series_budget)

    def _scan_candidates(self, cursor: Cursor) -> None:
        """The prefilter's candidate lines of the cursor's block, line by line until the block
        turns out busy (BLOCK_SET_AFTER, BLOCK_SET_EARLY; at once when the last block was), then
        the rest of it through line shapes (_scan_shapes)."""
        block, scan = cursor.block, cursor.scan
        previous = cursor.busy
        cursor.busy = False
        # A changed block is read line by line (its offsets map back to the raw one).
        shapes_ok = cursor.starts is None and not cursor.shapeless
        cursor.shapeless = max(0, cursor.shapeless - 1)
        match = self.prefilter.Match
        base, starts, first = cursor.base, cursor.starts, cursor.block_line
        candidates = 0
        pos = 0
        end = len(block)
        while pos < end:
            start = match(UNANCHORED, block, pos, end)[0][0]
            if start < 0:
                break
            line_start = block.rfind(b"\n", 0, start) + 1
            candidates += 1
            seen = cursor.line_no - cursor.block_line  # lines counted so far in the block
            if (
                shapes_ok
                and (
                    candidates == BLOCK_SET_AFTER
                    or (candidates == BLOCK_SET_EARLY and candidates * 20 >= seen)
                    or (candidates == 1 and previous)
                )
                and block.find(b"\r", line_start) < 0
            ):
                # Dense: candidates in 1 line of 16 or more so far (or the last block was
                # dense): looking up every line's shape (C loops) beats finding each candidate.
                cursor.busy = previous or 16 * candidates >= seen
                cursor.count_to(line_start)
                if self._scan_shapes(cursor, dense=cursor.busy):
                    return
                # The shapes did not repeat: the rest line by line, from the cursor.
                cursor.busy = shapes_ok = False
                cursor.shapeless = SHAPELESS_BLOCKS
                pos = cursor.counted
                continue
            line_end = block.find(b"\n", start)
            if line_end < 0:
                line_end = end
            # (Cursor.count_to and offset_of, inline: this runs once per candidate line)
            cursor.line_no += block.count(b"\n", cursor.counted, line_start)
            cursor.counted = line_start
            offset = base + (line_start if starts is None else starts[cursor.line_no - first])
            read_line(self, block[line_start:line_end], cursor.line_no, offset, scan)
            pos = line_end + 1

    # -- the rest of a busy block, shape by shape ---------------------------------------------

    def _scan_shapes(self, cursor: Cursor, dense: bool = False) -> bool:
        """Scan the cursor's block from the cursor (a line start; no CR from there) to its
        end, reading each line through its shape (shapes.py): the rank, the matches and the
        time come from the shape's offsets, and the matches are recorded per pattern in batches
        (store.record_batch), with the results and order of the per-line path. Lines whose shape
        does not decide them go through oneline.read_line, after the lines before them are recorded. Dense:
        every line, looked up in C (_scan_dense); else the prefilter's candidates. Returns True
        with the cursor at the block's end (every line counted); or, when the shapes do not
        repeat (STEP_ASIDE_AFTER), False with the cursor at the first line not read: the caller
        reads the rest line by line."""
        block, scan = cursor.block, cursor.scan
        pos, line_no, base = cursor.counted, cursor.line_no, cursor.base
        if dense and block.endswith(b"\n"):
            lines = self._scan_dense(cursor)
            if lines is None:
                return False
            cursor.line_no += lines
            cursor.counted = len(block)
            return True
        book = self.shapes
        known = book.known
        mask = MASK
        lines: list[bytes] = []
        numbers: list[int] = []
        offsets: list[int] = []
        shapes: list[Shape] = []
        new = 0
        for seen, (number, offset, raw) in enumerate(
            patterns.candidate_lines(self.prefilter, block, pos, line_no), 1
        ):
            if len(raw) > MAX_LINE:
                raw = raw[:MAX_LINE]
            shape = known.get(raw.translate(mask)) if len(raw) <= MAX_SHAPE_LINE else GENERAL
            if shape is None:
                new += 1
                if seen >= STEP_ASIDE_AFTER and 2 * new > seen:
                    if lines:
                        rows = ShapeRows.of_lines(scan.file_id, lines, numbers, offsets, shapes)
                        self._flush_shapes(rows, scan)
                    cursor.line_no, cursor.counted = number, offset
                    return False
                shape = book.shape_of(raw)
            if shape.general:
                if lines:
                    rows = ShapeRows.of_lines(scan.file_id, lines, numbers, offsets, shapes)
                    self._flush_shapes(rows, scan)
                    lines, numbers, offsets, shapes = [], [], [], []
                read_line(self, raw, number, base + offset, scan)
            elif shape.admits:
                lines.append(raw)
                numbers.append(number)
                offsets.append(base + offset)
                shapes.append(shape)
        if lines:
            rows = ShapeRows.of_lines(scan.file_id, lines, numbers, offsets, shapes)
            self._flush_shapes(rows, scan)
        cursor.count_to(len(block))
        return True

    def _scan_dense(self, cursor: Cursor) -> int | None:
        """_scan_shapes over every line of a block ending in a newline, from the cursor: lines
        are split, masked and looked up in their shapes by C loops; only lines of a new shape,
        and lines no shape decides, take Python of their own. Returns the number of lines read;
        None (nothing read) when more than half of at least STEP_ASIDE_AFTER lines are of new
        shapes."""
        block, scan = cursor.block, cursor.scan
        pos, line_no, base = cursor.counted, cursor.line_no, cursor.base
        book = self.shapes
        region = block[pos:]
        masked = region.translate(MASK).split(b"\n")
        masked.pop()  # after the last newline
        # each line's shape key, looked up in C (UNKNOWN for shapes not seen yet)
        keys = np.fromiter(map(book.key_of.get, masked, repeat(UNKNOWN)), np.int64, len(masked))
        if cursor.newlines is not None:  # (the block's, found once: _scan_block)
            ends = cursor.newlines[np.searchsorted(cursor.newlines, pos) :] - pos
        else:
            ends = np.flatnonzero(np.frombuffer(region, dtype=np.uint8) == 10)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        wanted = book.admits_table()[keys + UNKNOWN_AT]
        found: dict[bytes, Shape] = {}
        missing = np.flatnonzero(keys == UNKNOWN)
        if len(missing):  # new shapes: each worked out once, on its first line
            first: dict[bytes, int] = {}
            for i in missing.tolist():
                first.setdefault(masked[i], i)
            if len(keys) >= STEP_ASIDE_AFTER and 2 * len(first) > len(keys):
                return None
            for key, i in first.items():
                a, b = int(starts[i]), int(ends[i])
                found[key] = book.shape_of(region[a:b]) if b - a <= MAX_SHAPE_LINE else GENERAL
            news = [found[masked[i]] for i in missing.tolist()]
            keys[missing] = np.fromiter(map(SHAPE_KEY, news), np.int64, len(news))
            wanted[missing] = np.fromiter(map(SHAPE_ADMITS, news), bool, len(news))
        # every shape of the block by its key (past MAX_SHAPES, new ones are not in the book)
        by_key = book.by_key
        if book.full and found:
            by_key = {**book.by_key, **{shape.key: shape for shape in found.values()}}
        general = np.flatnonzero(keys < 0).tolist()
        segment = 0
        lines = len(keys)
        for stop in [*general, lines]:
            rows = np.flatnonzero(wanted[segment:stop]) + segment
            if len(rows):
                picked = ShapeRows(
                    scan.file_id,
                    region,
                    starts[rows],
                    ends[rows],
                    rows + line_no,
                    starts[rows] + (base + pos),
                    keys[rows],
                    by_key,
                )
                self._flush_shapes(picked, scan)
            if stop < lines:
                raw = region[int(starts[stop]) : int(ends[stop])]
                offset = pos + int(starts[stop])
                # A JSON record the prefilter skips matches nothing.
                if keys[stop] != JSON.key or (
                    self.prefilter.Match(UNANCHORED, block, offset, offset + len(raw))[0][0] >= 0
                ):
                    read_line(self, raw, line_no + stop, base + offset, scan)
            segment = stop + 1
        return lines

    def _flush_shapes(self, rows: ShapeRows, scan: FileScan) -> None:
        """Record rows read through their shapes, pattern by pattern, in runs where no series
        takes points from two patterns (ShapeRows.series_apart)."""
        parts = rows.series_apart()
        for part in parts:
            taken = rows if len(parts) == 1 else rows.take(part)
            for index, batch in taken.batches(scan):
                record_batch(self.users[index], batch, scan.runs)

    def _flush(self, scan: FileScan, next_line: int | None) -> None:
        """Judge what no later line can join (all at the input's end): patterns.flushes."""
        for index, flush in self.flushes:
            flush(scan.runs[index], scan.file_id, next_line, record_match)
