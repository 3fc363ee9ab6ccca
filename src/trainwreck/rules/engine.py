"""The diagnosis engine: streams logs through the compiled rules in bounded memory.

How a log is read, and why it is fast:
- input is read in blocks of a few MiB, cut at line ends; a line longer than MAX_LINE bytes is cut
  there (its tail is skipped, never buffered);
- one combined RE2 search over the block finds candidate lines: those that contain a literal that
  some pattern requires (or that the pattern itself could match, when no literal is provable);
  every other line costs only RE2's scan and a newline count;
- a candidate line is decoded, its rank prefix removed, and one RE2 set tells which patterns
  match; only those run again, for their captures;
- numbers go to per-rank numpy arrays that grow in chunks; evidence lines are capped per matcher.
"""

from __future__ import annotations

import calendar
import gzip
import json
import math
import multiprocessing
import os
import re
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import re2

from trainwreck.rules import condition as cond
from trainwreck.rules import detectors as det
from trainwreck.rules import prefixes, regexes
from trainwreck.rules.units import factor, to_number

BLOCK = 4 << 20  # bytes read at a time
MAX_LINE = 64 << 10  # a line is cut at this length
MAX_EVIDENCE_PER_MATCHER = 24
MAX_ROWS = 1_000_000  # kept capture values / events per matcher
MAX_SERIES_POINTS = 5_000_000  # per series and rank
EVIDENCE_TEXT = 400  # characters of a line kept as evidence
# Distinct ranks (or host labels) tracked per scan: each costs per-rank state in every matcher and
# series that sees it, so a log with a million distinct prefixes would otherwise cost gigabytes.
# Lines of further ranks are still read, with their rank unknown. (The largest jobs run tens of
# thousands of ranks.)
MAX_RANKS = 32_768
MAX_RANK_DIGITS = 9  # a "rank" of ten digits or more is not a rank
_U = re2._re2.RE2.Anchor.UNANCHORED

_INLINE_RANK = re.compile(
    rb"\[Rank (\d+)\]|\brank\b\s?[=:]\s?(\d+)\b|\brank (\d+)\b", re.IGNORECASE
)
_ISO = re.compile(rb"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_GLOG = re.compile(rb"(?:^|[\[\s])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
_FILE_RANK = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?:\D|$)", re.IGNORECASE)
_FILE_NUMBER = re.compile(r"^(\d+)\.(?:log|txt|out|err|jsonl)$")
_NODE = re.compile(r"^(?:node|host|worker)[_-]?\d+$", re.IGNORECASE)
_SAMPLE_PREFIX = re.compile(rb"(?m)^(?:[\w.-]+: )?\[(?:rank|default)(\d+)\]:")
GLOG_YEAR = 2000  # glog lines carry no year; timestamps are only compared with each other
# How a matcher converts its captures: (capture, factor or None, unit capture or None, default
# unit) per value; factor 0.0 marks a string capture (kept as text).
Plan = tuple[tuple[str, "float | None", "str | None", Any], ...]


class Grow:
    """A typed column that grows in chunks (the array module over-allocates geometrically, so
    appends are amortised O(1) and cost 8 bytes a value), read as a numpy array without a copy.
    Bounded by `limit`."""

    __slots__ = ("data", "limit")

    def __init__(self, typecode: str, limit: int = MAX_SERIES_POINTS):
        self.data = array(typecode)
        self.limit = limit

    def append(self, value: Any) -> bool:
        if len(self.data) >= self.limit:
            return False
        self.data.append(value)
        return True

    @property
    def size(self) -> int:
        return len(self.data)

    def view(self) -> np.ndarray:
        return (
            np.frombuffer(self.data, dtype=self.data.typecode)
            if len(self.data)
            else np.empty(0, dtype=self.data.typecode)
        )


class SeriesBuffer:
    """The points of one series on one rank, as rows (value, index, t, file, line, offset) in one
    array of doubles: one append per point, 48 bytes a point (file, line and offset are whole
    numbers far below 2**53, so doubles hold them exactly)."""

    __slots__ = ("count", "rows", "truncated")
    WIDTH = 6

    def __init__(self) -> None:
        self.rows = array("d")
        self.count = 0
        self.truncated = False

    def add(
        self, value: float, index: float, t: float, file_id: int, line: int, offset: int
    ) -> None:
        if self.count >= MAX_SERIES_POINTS:
            self.truncated = True
            return
        self.rows.extend((value, index, t, file_id, line, offset))
        self.count += 1

    def extend(self, other: SeriesBuffer, shift_index: bool = False) -> None:
        """Append another buffer's points (up to the cap). `shift_index`: their index is their
        position, which now starts after this buffer's points."""
        room = MAX_SERIES_POINTS - self.count
        taken = min(room, other.count)
        rows = other.rows[: taken * self.WIDTH]
        if shift_index and taken:
            table = np.frombuffer(rows, dtype=np.float64).reshape(-1, self.WIDTH)
            table[:, 1] += self.count
        self.rows.extend(rows)
        self.count += taken
        self.truncated |= other.truncated or other.count > room

    def points(self) -> det.Points:
        table = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.WIDTH)
        return det.Points(
            np.ascontiguousarray(table[:, 0]),
            np.ascontiguousarray(table[:, 1]),
            np.ascontiguousarray(table[:, 2]),
            table[:, 3].astype(np.int64),
            table[:, 4].astype(np.int64),
            table[:, 5].astype(np.int64),
        )


@dataclass
class Evidence:
    file: int
    line: int
    text: str
    rank: Any
    t: float
    part: str
    offset: int = -1


@dataclass
class MatcherState:
    count: int = 0
    rank_counts: dict[Any, int] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    first: dict[Any, tuple[float, int, int]] = field(
        default_factory=dict
    )  # rank -> (t, file, line)
    columns: dict[str, list[Any]] = field(default_factory=dict)
    events: list[tuple[Any, float, float, int, int, int]] | None = (
        None  # rank, t, step, file, line, offset
    )
    truncated: bool = False


class RuleRun:
    """The mutable state of one rule during a scan."""

    def __init__(self, rule: dict[str, Any]):
        self.rule = rule
        self.matchers: dict[str, MatcherState] = {name: MatcherState() for name in rule["matchers"]}
        for part, name in rule.get("fields", []):
            self.matchers[part].columns[name] = []
        event_parts = {
            spec[role]
            for spec in rule["detectors"].values()
            if spec["kind"] == "cooccur"
            for role in ("a", "b")
        }
        for name in event_parts & set(rule["matchers"]):
            self.matchers[name].events = []
        self.series: dict[str, dict[Any, SeriesBuffer]] = {name: {} for name in rule["series"]}
        self.feeds: dict[str, list[tuple[str, str, str | None]]] = {}
        for name, spec in rule["series"].items():
            for matcher in spec["matchers"]:
                self.feeds.setdefault(matcher, []).append((name, spec["value"], spec.get("index")))
        self.counters: dict[tuple[str, Any], int] = {}
        # Per matcher: (capture, factor or None, unit capture or None, default unit); factor 0.0
        # marks a string capture (kept as text).
        self.plans: dict[str, Plan] = {}
        for name, spec in rule["matchers"].items():
            plan: list[tuple[str, float | None, str | None, Any]] = []
            for capture, unit in spec["values"].items():
                if isinstance(unit, dict):
                    plan.append((capture, None, unit["unit_capture"], unit.get("default")))
                else:
                    plan.append((capture, unit_factor(unit), None, None))
            self.plans[name] = tuple(plan)
        self.blocks: dict[tuple[str, int, Any], tuple[int, dict[str, Any], Evidence]] = {}


@dataclass
class Skipped:
    file: str
    reason: str
    unread: bool = False  # nothing of the file could be read (diagnose exits 3 when all are)


@dataclass
class ScanResult:
    runs: list[RuleRun]
    files: list[str]
    skipped: list[Skipped]
    ranks_seen: set[Any]
    lines: int
    bytes: int
    unranked: int = 0  # lines whose rank was dropped because MAX_RANKS ranks were already seen

    def admit_rank(self, rank: Any) -> Any:
        """`rank`, or None once MAX_RANKS other ranks were seen (memory stays bounded)."""
        if rank is None or rank in self.ranks_seen:
            return rank
        if len(self.ranks_seen) >= MAX_RANKS:
            self.unranked += 1
            return None
        self.ranks_seen.add(rank)
        return rank


# --- the compiled rule set ------------------------------------------------------------------------


@dataclass
class _User:
    """One use of a distinct pattern by a rule's matcher (patterns are shared across rules)."""

    order: int  # end, capture, regex, start: closes blocks before a new one opens on the line
    run_index: int
    matcher: str
    role: str
    regex: Any  # the raw RE2 object: Match(anchor, bytes, pos, end) -> spans
    groups: list[tuple[str, int]]  # capture name -> group number
    block: dict[str, Any] | None


class Engine:
    def __init__(self, rules: list[dict[str, Any]]):
        self.rules = rules
        patterns: dict[str, int] = {}
        users: list[list[_User]] = []
        self.json_matchers: list[tuple[int, str, dict[str, Any]]] = []
        role_order = {"end": 0, "capture": 1, "regex": 2, "start": 3}

        def add(
            pattern: str, run_index: int, matcher: str, role: str, block: dict[str, Any] | None
        ) -> None:
            if pattern not in patterns:
                patterns[pattern] = len(patterns)
                users.append([])
            compiled = regexes.compile(pattern)
            groups = sorted(compiled.groupindex.items(), key=lambda item: item[1])
            users[patterns[pattern]].append(
                _User(role_order[role], run_index, matcher, role, compiled._regexp, groups, block)
            )

        self.json_literals: set[str] = set()
        self.missing_from = False
        for index, rule in enumerate(rules):
            init = rule["report"]["initiating_rank"]
            if isinstance(init, dict) and "missing_from" in init:
                self.missing_from = True
            for name, spec in rule["matchers"].items():
                if spec["kind"] == "regex":
                    add(spec["regex"], index, name, "regex", None)
                elif spec["kind"] == "block":
                    add(spec["start"], index, name, "start", spec)
                    add(spec["end"], index, name, "end", spec)
                    for pattern in spec["capture"]:
                        add(pattern, index, name, "capture", spec)
                else:
                    self.json_matchers.append((index, name, spec["json"]))
                    strings = [
                        v for v in spec["json"].values() if isinstance(v, str) and len(v) >= 2
                    ]
                    if strings:
                        self.json_literals.add(re2.escape(json.dumps(strings[0])))
                    elif spec["json"]:
                        self.json_literals.add(re2.escape(json.dumps(next(iter(spec["json"])))))
                    else:
                        self.json_literals.add(r"\{\s*\"")
        # A series that two rules define alike (fed by one regex matcher with the same pattern
        # and units, the same value and index) gets the same points from the same lines: it is
        # filled once and shared (the step-time series of several straggler rules).
        self.shared_series: dict[tuple[int, str], tuple[int, str]] = {}
        owners: dict[tuple[str, str, str, str | None], tuple[int, str]] = {}
        for index, rule in enumerate(rules):
            for name, spec in rule["series"].items():
                if len(spec["matchers"]) != 1:
                    continue
                matcher = rule["matchers"][spec["matchers"][0]]
                if matcher["kind"] != "regex":
                    continue
                key = (
                    matcher["regex"],
                    json.dumps(matcher["values"], sort_keys=True),
                    spec["value"],
                    spec.get("index"),
                )
                owner = owners.setdefault(key, (index, name))
                if owner != (index, name):
                    self.shared_series[(index, name)] = owner
        for users_of in users:
            users_of.sort(key=lambda u: u.order)
        self.users = users
        # Patterns whose every use is a plain regex matcher without a 'rank' capture can take the
        # bulk path (_scan_bulk) when they are the only pattern that can match in a block.
        self.bulk = [
            all(u.role == "regex" for u in users_of)
            and all(name != "rank" for name, _ in users_of[0].groups)
            and _feeds_distinct(rules, users_of)
            for users_of in users
        ]
        self.pattern_list = list(patterns)
        self.set = None
        if patterns:
            self.set = re2.Set.SearchSet(regexes.options())
            for pattern in self.pattern_list:
                self.set.Add(pattern)
            self.set.Compile()
        self.prefilter: Any = None
        self.block_set: Any = None
        self._start_filter: Any = None
        self._prefilter_ready = False

    def _build_prefilter(self, sample: bytes) -> None:
        """One RE2 search for all patterns' required literals, chosen as the rarest in the first
        block of input (a line must contain one of them to be worth matching).

        The same per-pattern prefilters also go into an RE2 set run once over each block: it
        names the patterns that can match anywhere in the block, so a block where only one can
        (the step-time lines of a long run) skips the per-line set match."""
        prefilters = [regexes.prefilter_pattern(p, sample) for p in self.pattern_list]
        alternatives = [f"(?:{p})" for p in prefilters]
        alternatives += sorted(self.json_literals)
        if alternatives:
            opts = regexes.options()
            opts.never_capture = True
            opts.max_mem = 256 << 20
            self.prefilter = re2.compile("(?m)" + "|".join(alternatives), opts)._regexp
        if prefilters:
            opts = regexes.options()
            opts.never_capture = True
            opts.max_mem = 256 << 20
            block_set = re2.Set.SearchSet(opts)
            try:
                for pattern in prefilters:
                    block_set.Add(f"(?m:{pattern})")
                block_set.Compile()
                self.block_set = block_set
            except Exception:  # a prefilter RE2 cannot take in a set: every line uses the set
                self.block_set = None
        self._prefilter_ready = True

    def _only_pattern(self, block: bytes, start: int) -> int:
        """The one pattern that can match in `block` from `start` (its index), or -1 when several
        can, or when it cannot be told. An empty answer from RE2's set is ambiguous (no pattern,
        or its DFA ran out of memory and gave up), so it also means "use the per-line set"."""
        if self.block_set is None:
            return -1
        if block.find(b"\r", start) >= 0:  # '$' before a CR line end: use the per-line set
            return -1
        possible = self.block_set.Match(memoryview(block)[start:])
        return possible[0] if possible and len(possible) == 1 else -1

    # -- input ----------------------------------------------------------------------------------

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
        workers = self._workers(inputs, jobs)
        if workers > 1:
            self._scan_parallel(inputs, workers, result)
            return result
        for display, source in inputs:
            file_id = len(result.files)
            result.files.append(display)
            file_rank = rank_from_path(display)
            if file_rank is not None:
                result.ranks_seen.add(file_rank)
            try:
                self._scan_file(source, display, file_id, file_rank, runs, result)
            except MemoryError:
                result.skipped.append(
                    Skipped(display, "out of memory while reading; the rest was skipped")
                )
            except Exception as exc:  # one bad file never ends the run (nor loses the others)
                result.skipped.append(
                    Skipped(display, f"could not be scanned ({exc!r}); the rest was skipped")
                )
        return result

    @staticmethod
    def _workers(inputs: list[tuple[str, Any]], jobs: int | None) -> int:
        """How many processes: one per file up to the CPU count, only for plain files, and (when
        automatic) only when there is enough input to repay starting them."""
        if jobs == 1 or not inputs or "fork" not in multiprocessing.get_all_start_methods():
            return 1
        sources = [source for _, source in inputs]
        if any(not isinstance(s, (str, Path)) or str(s) == "-" for s in sources):
            return 1
        try:
            sizes = [os.path.getsize(s) for s in sources]
        except OSError:
            return 1
        if jobs is None and sum(sizes) < PARALLEL_MIN_BYTES:
            return 1
        # A file of SPLIT_MIN_BYTES or more can be scanned in parts (see _plan_parts).
        tasks = sum(max(1, size // SPLIT_MIN_BYTES) for size in sizes)
        cpus = os.cpu_count() or 1
        return max(1, min(jobs or cpus, cpus if jobs is None else jobs, tasks))

    def _scan_parallel(
        self, inputs: list[tuple[str, Any]], workers: int, result: ScanResult
    ) -> None:
        global _WORKER_ENGINE
        _WORKER_ENGINE = (
            self  # inherited by the forked workers (compiled RE2 objects do not pickle)
        )
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            tasks: list[tuple[str, list[Any]]] = []
            for file_id, (display, source) in enumerate(inputs):
                parts = (
                    self._plan_parts(source, display, workers) if len(inputs) < workers else None
                )
                if parts is None:
                    tasks.append((display, [pool.submit(_scan_one, file_id, display, source)]))
                    continue
                ranks, ranges = parts
                for hit in ranks:
                    result.admit_rank(rank_number(hit))
                tasks.append(
                    (
                        display,
                        [
                            pool.submit(_scan_one, file_id, display, source, start, end, line)
                            for start, end, line in ranges
                        ],
                    )
                )
            for display, futures in tasks:
                result.files.append(display)
                for index, future in enumerate(futures):
                    try:
                        part = future.result()
                    except Exception as exc:  # a worker killed (out of memory) or failing
                        what = "could not be scanned" if len(futures) == 1 else "was cut short"
                        result.skipped.append(Skipped(display, f"{what} ({exc!r}); skipped"))
                        break
                    _merge(result, part, continues=index > 0)
        _WORKER_ENGINE = None

    def _plan_parts(
        self, source: Any, display: str, workers: int
    ) -> tuple[list[bytes], list[tuple[int, int, int]]] | None:
        """Where to cut one plain file into parts that scan alike in separate processes:
        (ranks a serial scan samples from its blocks, [(start, end, first line number)]), or None
        to scan it whole. Parts start where a serial scan starts a block, never where a block
        matcher (start ... end) could be open; a file whose reading is irregular (binary, cut
        lines, read errors) is not split."""
        try:
            size = os.path.getsize(source)
        except OSError:
            return None
        count = min(workers, size // SPLIT_MIN_BYTES)
        if count < 2:
            return None
        try:
            with open(source, "rb") as handle:
                if handle.read(2) == b"\x1f\x8b":
                    return None  # gzip is read from its start
        except OSError:
            return None
        scratch = ScanResult([], [], [], set(), 0, 0)
        starts: list[tuple[int, int]] = []  # (offset, line number) of each serial block
        ranks: list[bytes] = []  # sampled as a serial scan samples them, admitted in that order
        offset, line = 0, 1
        try:
            with open(source, "rb") as handle:
                for block in self._blocks(handle, display, scratch):
                    starts.append((offset, line))
                    if self.missing_from:
                        ranks.extend(_SAMPLE_PREFIX.findall(block[:65536]))
                    offset += len(block)
                    line += block.count(b"\n")
        except OSError:
            return None
        if scratch.skipped or offset != size:
            return None
        cuts: list[tuple[int, int]] = []
        wanted = 1
        for start, number in starts[1:]:
            if start >= wanted * size // count and self._no_open_block(source, start):
                cuts.append((start, number))
                wanted += 1
                if wanted == count:
                    break
        if not cuts:
            return None
        ranges = []
        previous = (0, 1)
        for cut in [*cuts, (size, 0)]:
            ranges.append((previous[0], cut[0], previous[1]))
            previous = cut
        return ranks, ranges

    def _no_open_block(self, source: Any, offset: int) -> bool:
        """Whether no block matcher can be open at `offset` (a line start): no line among the
        max_lines before it can start one (by the start patterns' prefilters)."""
        starts = [
            (spec["start"], spec["max_lines"])
            for rule in self.rules
            for spec in rule["matchers"].values()
            if spec["kind"] == "block"
        ]
        if not starts:
            return True
        lines = max(limit for _, limit in starts)
        window = min(offset, 4 << 20)
        try:
            with open(source, "rb") as handle:
                handle.seek(offset - window)
                data = handle.read(window)
        except OSError:
            return False
        if data.count(b"\n") < lines and window < offset:
            return False  # the window does not reach back far enough: do not cut here
        cut = len(data)
        for _ in range(lines):
            cut = data.rfind(b"\n", 0, cut - 1) if cut > 0 else -1
            if cut < 0:
                cut = 0
                break
        tail = data[cut:]
        if b"\r" in tail:
            return False  # a '$' before a CR line end: do not rely on the prefilters here
        if self._start_filter is None:
            alternatives = [f"(?:{regexes.prefilter_pattern(p)})" for p, _ in starts]
            opts = regexes.options()
            opts.never_capture = True
            self._start_filter = re2.compile("(?m)" + "|".join(alternatives), opts)._regexp
        return self._start_filter.Match(_U, tail, 0, len(tail))[0][0] < 0

    def _open(self, source: Any, display: str, result: ScanResult) -> BinaryIO | None:
        if not isinstance(source, (str, Path)):
            return source
        if str(source) == "-":
            return sys.stdin.buffer
        path = Path(source)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed by the caller
            # peek, not read and seek: a FIFO or `<(cmd)` cannot seek
            head = handle.peek(2)[:2]
        except OSError as exc:
            result.skipped.append(Skipped(display, f"unreadable: {exc.strerror or exc}", True))
            return None
        if head == b"\x1f\x8b":
            return _GzipStream(handle)  # type: ignore[return-value]
        return handle

    def _blocks(
        self, handle: BinaryIO, display: str, result: ScanResult, head: bool = True
    ) -> Iterator[bytes]:
        """Blocks of whole lines; lines longer than MAX_LINE are cut there. `head`: the reading
        starts at the start of the file (where binary files are told apart)."""
        pending = b""
        skipping = False  # inside the uncopied tail of an overlong line
        first = head
        held_cr = b""  # a CR ending the last read: a line end unless a LF follows
        while True:
            try:
                data = handle.read(BLOCK)
            except (EOFError, zlib.error, gzip.BadGzipFile, GzipDamage) as exc:
                reason = (
                    str(exc)
                    if isinstance(exc, GzipDamage)
                    else "truncated gzip stream"
                    if isinstance(exc, EOFError)
                    else f"corrupt gzip data ({exc})"
                )
                result.skipped.append(
                    Skipped(display, f"{reason}: read up to the damage, the rest was skipped")
                )
                data = b""
            except OSError as exc:
                result.skipped.append(
                    Skipped(display, f"read error: {exc.strerror or exc}; the rest was skipped")
                )
                data = b""
            if first:
                first = False
                if data and _looks_binary(data[:8192]):
                    result.skipped.append(Skipped(display, "binary file (not text); skipped"))
                    return
            data = lone_cr_to_lf(held_cr + data) if data else held_cr.replace(b"\r", b"\n")
            held_cr = b""
            if data.endswith(b"\r"):
                data, held_cr = data[:-1], b"\r"
            if not data:
                if pending:
                    yield pending + b"\n"
                return
            if skipping:
                cut = data.find(b"\n")
                if cut < 0:
                    continue
                data = data[cut + 1 :]
                skipping = False
            buffer = pending + data if pending else data
            end = buffer.rfind(b"\n")
            if end < 0:
                if len(buffer) > MAX_LINE:
                    result.skipped.append(
                        Skipped(display, f"a line longer than {MAX_LINE // 1024} KiB was cut there")
                    )
                    yield buffer[:MAX_LINE] + b"\n"
                    pending = b""
                    skipping = True
                else:
                    pending = buffer
                continue
            pending = buffer[end + 1 :]
            if len(pending) > MAX_LINE:
                result.skipped.append(
                    Skipped(display, f"a line longer than {MAX_LINE // 1024} KiB was cut there")
                )
                yield buffer[: end + 1] + pending[:MAX_LINE] + b"\n"
                pending = b""
                skipping = True
                continue
            yield buffer[: end + 1]

    def _scan_file(
        self,
        source: Any,
        display: str,
        file_id: int,
        file_rank: Any,
        runs: list[RuleRun],
        result: ScanResult,
        part: tuple[int, int, int] | None = None,
    ) -> None:
        """Scan one input; `part` = (start, end, number of the line at start) scans that byte
        range of a plain file (see _plan_parts: the parent samples its ranks)."""
        handle = self._open(source, display, result)
        if handle is None:
            return
        line_no = 1  # number of the line starting at `counted`
        base = 0  # offset of the block in the (decompressed) stream
        unranked = result.unranked
        first_line = 1
        reader: Any = handle
        if part is not None:
            base, stop, first_line = part
            line_no = first_line
            handle.seek(base)
            reader = _Range(handle, stop - base)
        try:
            for block in self._blocks(reader, display, result, head=part is None or base == 0):
                if not self._prefilter_ready:
                    self._build_prefilter(block[: 1 << 20])
                prefilter = self.prefilter
                result.bytes += len(block)
                raw_length = len(block)
                # The paste-shape layer (prefixes.py): line numbers stay; a changed block is
                # scanned line by line and its byte offsets are mapped back to the raw block.
                shaped = prefixes.normalize_block(block)
                starts = None if shaped is block else prefixes.line_starts(block)
                block = shaped
                if self.missing_from and part is None:
                    for hit in _SAMPLE_PREFIX.findall(block[:65536]):
                        result.admit_rank(rank_number(hit))
                counted = 0
                pos = 0
                end = len(block)
                block_line = line_no
                if prefilter is not None:
                    match = prefilter.Match
                    only = -1
                    candidates = 0
                    while pos < end:
                        start = match(_U, block, pos, end)[0][0]
                        if start < 0:
                            break
                        line_start = block.rfind(b"\n", 0, start) + 1
                        candidates += 1
                        if candidates == BLOCK_SET_AFTER or (
                            candidates == BLOCK_SET_EARLY
                            and candidates * 20 >= line_no - block_line
                        ):
                            only = self._only_pattern(block, line_start)
                            if only >= 0 and self.bulk[only] and starts is None:
                                line_no += block.count(b"\n", counted, line_start)
                                counted = line_start
                                line_no, counted = self._scan_bulk(
                                    block,
                                    line_start,
                                    line_no,
                                    base,
                                    only,
                                    file_id,
                                    file_rank,
                                    runs,
                                    result,
                                    # candidates in at least half the lines so far
                                    dense=2 * candidates >= line_no - block_line,
                                )
                                break
                        line_end = block.find(b"\n", start)
                        if line_end < 0:
                            line_end = end
                        line_no += block.count(b"\n", counted, line_start)
                        counted = line_start
                        self._line(
                            block[line_start:line_end],
                            line_no,
                            base + (line_start if starts is None else starts[line_no - block_line]),
                            file_id,
                            file_rank,
                            runs,
                            result,
                            only,
                        )
                        pos = line_end + 1
                line_no += block.count(b"\n", counted, end)
                base += raw_length
            result.lines += line_no - first_line
        finally:
            if result.unranked > unranked:
                result.skipped.append(
                    Skipped(
                        display,
                        f"more than {MAX_RANKS:,} distinct ranks; lines of further ranks were "
                        "read with their rank unknown",
                    )
                )
            if handle is not sys.stdin.buffer:
                handle.close()

    # -- the rest of a block where one pattern alone can match ---------------------------------

    def _scan_bulk(
        self,
        block: bytes,
        pos: int,
        line_no: int,
        base: int,
        only: int,
        file_id: int,
        file_rank: Any,
        runs: list[RuleRun],
        result: ScanResult,
        dense: bool = False,
    ) -> tuple[int, int]:
        """Scan `block` from `pos` (a line start numbered `line_no`) to its end, where pattern
        `only` is the only one that can match (see _only_pattern). Per line this finds the line,
        its rank and the match, as _line does; captures are then converted and recorded for the
        whole block at once (_flush_bulk), with the same results in the same order. Returns the
        line number and offset of the last line start counted."""
        match = self.prefilter.Match
        regex = self.users[only][0].regex
        json_lines = bool(self.json_matchers)
        admit = result.admit_rank
        end = len(block)
        counted = pos
        batch = _Batch(file_id)
        if dense and block.endswith(b"\n"):
            # Most lines are candidates: run the pattern on every line instead of looking for
            # the next candidate first (a line the prefilter would skip cannot match it).
            line_start = pos
            for whole in block[pos:end].split(b"\n")[:-1]:
                number = line_no
                line_no += 1
                offset = line_start
                line_start += len(whole) + 1
                raw = whole[:MAX_LINE] if len(whole) > MAX_LINE else whole
                rank, body = split_prefix(raw)
                if json_lines and body.lstrip()[:1] == b"{":
                    if match(_U, block, offset, offset + len(whole))[0][0] >= 0:
                        self._flush_bulk(only, batch, runs)
                        batch = _Batch(file_id)
                        self._line(
                            raw, number, base + offset, file_id, file_rank, runs, result, only
                        )
                    continue
                spans = regex.Match(_U, body, 0, len(body))
                if spans[0][0] < 0:
                    continue
                if rank is None:
                    inline = _INLINE_RANK.search(body)
                    if inline:
                        rank = rank_number(inline.group(1) or inline.group(2) or inline.group(3))
                    else:
                        rank = file_rank
                rank = admit(rank)
                batch.numbers.append(number)
                batch.offsets.append(base + offset)
                batch.ranks.append(rank)
                batch.raws.append(raw)
                batch.bodies.append(body)
                batch.spans.append(spans)
            self._flush_bulk(only, batch, runs)
            return line_no, end
        while pos < end:
            start = match(_U, block, pos, end)[0][0]
            if start < 0:
                break
            line_start = block.rfind(b"\n", 0, start) + 1
            line_end = block.find(b"\n", start)
            if line_end < 0:
                line_end = end
            line_no += block.count(b"\n", counted, line_start)
            counted = line_start
            pos = line_end + 1
            raw = block[line_start:line_end]  # no CR here (_only_pattern)
            if len(raw) > MAX_LINE:
                raw = raw[:MAX_LINE]
            rank, body = split_prefix(raw)
            if json_lines and body.lstrip()[:1] == b"{":
                # A JSON record may feed other matchers: the general path, in order.
                self._flush_bulk(only, batch, runs)
                batch = _Batch(file_id)
                self._line(raw, line_no, base + line_start, file_id, file_rank, runs, result, only)
                continue
            spans = regex.Match(_U, body, 0, len(body))
            if spans[0][0] < 0:
                continue
            if rank is None:
                inline = _INLINE_RANK.search(body)
                if inline:
                    rank = rank_number(inline.group(1) or inline.group(2) or inline.group(3))
                else:
                    rank = file_rank
            rank = admit(rank)
            batch.numbers.append(line_no)
            batch.offsets.append(base + line_start)
            batch.ranks.append(rank)
            batch.raws.append(raw)
            batch.bodies.append(body)
            batch.spans.append(spans)
        self._flush_bulk(only, batch, runs)
        return line_no, counted

    def _flush_bulk(self, only: int, batch: _Batch, runs: list[RuleRun]) -> None:
        n = len(batch.numbers)
        if not n:
            return
        users = self.users[only]
        captured: dict[str, list[Any]] = {}
        for name, number in users[0].groups:
            captured[name] = [
                body[span[number][0] : span[number][1]].decode("utf-8", "replace")
                if span[number][0] >= 0
                else None
                for body, span in zip(batch.bodies, batch.spans, strict=True)
            ]
        converted: dict[Plan, dict[str, list[Any]]] = {}
        for user in users:
            run = runs[user.run_index]
            plan = run.plans[user.matcher]
            columns = converted.get(plan)
            if columns is None:
                columns = converted[plan] = _convert_columns(plan, dict(captured), n)
            _store_bulk(run, user.matcher, columns, batch)

    # -- one candidate line ---------------------------------------------------------------------

    def _line(
        self,
        raw: bytes,
        line_no: int,
        offset: int,
        file_id: int,
        file_rank: Any,
        runs: list[RuleRun],
        result: ScanResult,
        only: int = -1,
    ) -> None:
        if len(raw) > MAX_LINE:
            raw = raw[:MAX_LINE]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        rank, body = split_prefix(raw)
        spans: Any = None
        if only >= 0:
            # Only this pattern can match in the block: its own match decides, and its spans
            # are the captures (one RE2 call instead of a set match and then a match).
            spans = self.users[only][0].regex.Match(_U, body, 0, len(body))
            hits = [only] if spans[0][0] >= 0 else None
        else:
            hits = self.set.Match(body) if self.set is not None else None
        record: dict[str, Any] | None = None
        if self.json_matchers and body.lstrip()[:1] == b"{":
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, dict):
                record = parsed
        if not hits and record is None:
            return
        if rank is None:
            if record is not None and isinstance(record.get("rank"), int):
                rank = rank_number(record["rank"])
            else:
                inline = _INLINE_RANK.search(body)
                if inline:
                    rank = rank_number(inline.group(1) or inline.group(2) or inline.group(3))
                else:
                    rank = file_rank
        # The time is parsed when a rule first asks for it (series, evidence, a rank's first line).
        t: float | None = None
        if record is not None and isinstance(record.get("t"), (int, float)):
            t = _number(record["t"])
        rank = result.admit_rank(rank)
        context = _Line(file_id, line_no, raw, rank, t, offset)
        if hits:
            for index in hits:
                users = self.users[index]
                if spans is not None:
                    caps = _named(users[0].groups, body, spans)
                else:
                    caps = self._captures(users[0], body)
                if caps is None:
                    continue
                converted: dict[Plan, dict[str, Any]] = {}
                for user in users:
                    run = runs[user.run_index]
                    if user.role == "regex":
                        # Rules sharing a pattern often convert its captures alike: once.
                        plan = run.plans[user.matcher]
                        done = converted.get(plan)
                        if done is None:
                            done = converted[plan] = _convert(plan, dict(caps))
                        self._store(run, user.matcher, done, context, None)
                    else:
                        self._pattern_hit(user, dict(caps), context, run)
        if record is not None:
            for run_index, name, wanted in self.json_matchers:
                if all(record.get(k) == v for k, v in wanted.items()):
                    caps = {k: v for k, v in record.items() if isinstance(k, str)}
                    self._record(runs[run_index], name, caps, context, None)

    @staticmethod
    def _captures(user: _User, body: bytes) -> dict[str, Any] | None:
        """Named captures of a pattern on a line (computed once, shared by every rule using it)."""
        if not user.groups:
            return {}
        spans = user.regex.Match(_U, body, 0, len(body))
        if spans[0][0] < 0:
            return None
        return _named(user.groups, body, spans)

    def _pattern_hit(self, user: _User, caps: dict[str, Any], line: _Line, run: RuleRun) -> None:
        if user.role == "regex":
            self._record(run, user.matcher, caps, line, None)
            return
        assert user.block is not None
        key = (user.matcher, line.file, line.rank)
        if user.role == "start":
            run.blocks[key] = (
                line.number,
                dict(caps),
                Evidence(
                    line.file,
                    line.number,
                    line.text(),
                    line.rank,
                    line.t,
                    user.matcher,
                    line.offset,
                ),
            )
            return
        opened = run.blocks.get(key)
        if opened is None:
            return
        start_line, block_caps, start_evidence = opened
        if line.number - start_line + 1 > user.block["max_lines"]:
            del run.blocks[key]
            return
        for name, value in caps.items():
            block_caps.setdefault(name, value)
        if user.role == "end":
            del run.blocks[key]
            self._record(run, user.matcher, block_caps, line, start_evidence)

    def _record(
        self,
        run: RuleRun,
        name: str,
        caps: dict[str, Any],
        line: _Line,
        start: Evidence | None,
    ) -> None:
        self._store(run, name, _convert(run.plans[name], caps), line, start)

    @staticmethod
    def _store(
        run: RuleRun,
        name: str,
        caps: dict[str, Any],
        line: _Line,
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
                    named in state.rank_counts or len(state.rank_counts) < MAX_RANKS
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
                Evidence(line.file, line.number, line.text(), rank, line.t, name, line.offset)
            )
        if rank not in state.first:
            if start is not None:
                state.first[rank] = (start.t, start.file, start.line)
            else:
                state.first[rank] = (line.t, line.file, line.number)
        if state.columns:
            if state.count <= MAX_ROWS:
                for column, values in state.columns.items():
                    values.append(caps.get(column))
            else:
                state.truncated = True
        if state.events is not None and len(state.events) < MAX_ROWS:
            state.events.append(
                (rank, line.t, _number(caps.get("step")), line.file, line.number, line.offset)
            )
        feeds = run.feeds.get(name)
        if feeds:
            for series, value_name, index_name in feeds:
                value = caps.get(value_name)
                if value.__class__ is not float:
                    value = _number(value)
                if value != value or value in (math.inf, -math.inf):
                    continue
                per_rank = run.series[series]
                buffer = per_rank.get(rank)
                if buffer is None:
                    buffer = per_rank[rank] = SeriesBuffer()
                if buffer.count >= MAX_SERIES_POINTS:
                    buffer.truncated = True
                    continue
                if index_name:
                    index = caps.get(index_name)
                    if index.__class__ is not float:
                        index = _number(index)
                else:
                    index = float(buffer.count)
                buffer.rows.extend((value, index, line.t, line.file, line.number, line.offset))
                buffer.count += 1


def _convert(plan: Plan, caps: dict[str, Any]) -> dict[str, Any]:
    """Apply a matcher's units to its captures in place: numbers times their unit's factor,
    NaN for an unknown unit, text for 'string'. Returns `caps`."""
    for capture, factor_, unit_capture, default in plan:
        raw = caps.get(capture)
        if raw is None:
            continue
        if unit_capture is not None:
            unit_text = caps.get(unit_capture) or default
            factor_ = _unit_factor_cached(unit_text) if unit_text else None
        if factor_ is None:
            caps[capture] = math.nan
            continue
        if factor_ == 0.0:  # "string"
            continue
        caps[capture] = _number(raw) * factor_
    return caps


_UNIT_FACTORS: dict[Any, float | None] = {}


def _unit_factor_cached(unit: Any) -> float | None:
    try:
        return _UNIT_FACTORS[unit]
    except KeyError:
        pass
    except TypeError:  # an unhashable default
        return unit_factor(unit)
    found = unit_factor(unit)
    if len(_UNIT_FACTORS) < 4096:
        _UNIT_FACTORS[unit] = found
    return found


class _Batch:
    """Matched lines of one block awaiting _flush_bulk: where they are, their rank and match."""

    __slots__ = (
        "_all_times",
        "bodies",
        "file",
        "numbers",
        "offsets",
        "ranks",
        "raws",
        "spans",
        "times",
    )

    def __init__(self, file_id: int) -> None:
        self.file = file_id
        self.numbers: list[int] = []
        self.offsets: list[int] = []
        self.ranks: list[Any] = []
        self.raws: list[bytes] = []
        self.bodies: list[bytes] = []
        self.spans: list[Any] = []
        self.times: dict[int, float] = {}
        self._all_times: np.ndarray | None = None

    def t(self, i: int) -> float:
        """Time of line i, parsed on first use (as _Line.t)."""
        found = self.times.get(i)
        if found is None:
            found = self.times[i] = parse_time(self.raws[i])
        return found

    def all_times(self) -> np.ndarray:
        if self._all_times is None:
            times = self.times
            self._all_times = np.array(
                [times.get(i) or parse_time(raw) for i, raw in enumerate(self.raws)],
                dtype=np.float64,
            )
        return self._all_times


def _feeds_distinct(rules: list[dict[str, Any]], users: list[_User]) -> bool:
    """Whether no series takes points from two uses of one pattern (then per-line order would
    interleave their points, which a per-matcher bulk store would not)."""
    seen: set[tuple[int, str]] = set()
    for user in users:
        for name, spec in rules[user.run_index]["series"].items():
            if user.matcher in spec["matchers"]:
                if (user.run_index, name) in seen:
                    return False
                seen.add((user.run_index, name))
    return True


def _convert_columns(plan: Plan, columns: dict[str, list[Any]], n: int) -> dict[str, list[Any]]:
    """_convert over columns of captures (one list per capture, None where it did not take
    part); entries apply in order, as they do per line."""
    for capture, factor_, unit_capture, default in plan:
        values = columns.get(capture)
        if values is None:
            continue
        if unit_capture is not None:
            units = columns.get(unit_capture) or [None] * n
            out: list[Any] = []
            for value, unit in zip(values, units, strict=True):
                if value is None:
                    out.append(None)
                    continue
                unit_text = unit or default
                found = _unit_factor_cached(unit_text) if unit_text else None
                if found is None:
                    out.append(math.nan)
                elif found == 0.0:
                    out.append(value)
                else:
                    out.append(_number(value) * found)
            columns[capture] = out
        elif factor_ is None:
            columns[capture] = [None if v is None else math.nan for v in values]
        elif factor_ != 0.0:  # 0.0: "string", kept as text
            try:
                columns[capture] = [float(v) * factor_ for v in values]
            except (TypeError, ValueError):  # None, 1,234 and the like: one by one
                columns[capture] = [None if v is None else _number(v) * factor_ for v in values]
    return columns


def _store_bulk(run: RuleRun, name: str, columns: dict[str, list[Any]], batch: _Batch) -> None:
    """Engine._store for every line of a batch (no rank capture, no block start): the same
    counts, evidence, first lines, columns, events and series points, in line order."""
    n = len(batch.numbers)
    ranks, numbers, offsets, file_id = batch.ranks, batch.numbers, batch.offsets, batch.file
    state = run.matchers[name]
    before = state.count
    state.count += n
    counts = state.rank_counts
    for rank in ranks:
        counts[rank] = counts.get(rank, 0) + 1
    room = MAX_EVIDENCE_PER_MATCHER - len(state.evidence)
    for i in range(min(max(room, 0), n)):
        state.evidence.append(
            Evidence(
                file_id,
                numbers[i],
                evidence_text(batch.raws[i]),
                ranks[i],
                batch.t(i),
                name,
                offsets[i],
            )
        )
    first = state.first
    if any(rank not in first for rank in set(ranks)):
        index_of = dict(zip(reversed(ranks), range(n - 1, -1, -1), strict=True))
        for rank in dict.fromkeys(ranks):
            if rank not in first:
                i = index_of[rank]
                first[rank] = (batch.t(i), file_id, numbers[i])
    if state.columns:
        keep = max(0, min(n, MAX_ROWS - before))
        for column, values in state.columns.items():
            found = columns.get(column)
            values.extend(found[:keep] if found is not None else [None] * keep)
        if before + n > MAX_ROWS:
            state.truncated = True
    if state.events is not None:
        steps = columns.get("step")
        for i in range(min(max(MAX_ROWS - len(state.events), 0), n)):
            state.events.append(
                (
                    ranks[i],
                    batch.t(i),
                    _number(steps[i] if steps is not None else None),
                    file_id,
                    numbers[i],
                    offsets[i],
                )
            )
    feeds = run.feeds.get(name)
    if feeds:
        _feed_bulk(run, feeds, columns, batch)


def _numbers(columns: dict[str, list[Any]], name: str, n: int) -> np.ndarray:
    """A capture column as floats (_number of each value; NaN where it is missing), computed
    once per batch and plan."""
    key = "\0numbers\0" + name
    found = columns.get(key)
    if found is None:
        values = columns.get(name)
        if values is None:
            found = [math.nan] * n
        else:
            try:
                found = [v if v.__class__ is float else float(v) for v in values]
            except (TypeError, ValueError):
                found = [_number(v) for v in values]
        columns[key] = found
    return np.asarray(found, dtype=np.float64)


def _feed_bulk(
    run: RuleRun,
    feeds: list[tuple[str, str, str | None]],
    columns: dict[str, list[Any]],
    batch: _Batch,
) -> None:
    """The series points of a batch: per series, each rank's finite values in line order (a
    rank's buffer is created at its first finite value, as per line), up to the cap."""
    n = len(batch.numbers)
    codes_of: dict[Any, int] = {}
    codes = np.fromiter(
        (codes_of.setdefault(rank, len(codes_of)) for rank in batch.ranks), np.int64, n
    )
    ranks = list(codes_of)
    numbers = np.asarray(batch.numbers, dtype=np.float64)
    offsets = np.asarray(batch.offsets, dtype=np.float64)
    for series, value_name, index_name in feeds:
        values = _numbers(columns, value_name, n)
        keep = np.isfinite(values)
        if not keep.any():
            continue
        times = batch.all_times()
        indexes = _numbers(columns, index_name, n) if index_name else None
        per_rank = run.series[series]
        kept = np.flatnonzero(keep)
        kept_codes = codes[kept]
        # Ranks in the order of their first finite value (buffers are created in that order).
        present, first_at = np.unique(kept_codes, return_index=True)
        for code in present[np.argsort(first_at, kind="stable")]:
            rank = ranks[code]
            rows = kept[kept_codes == code]
            buffer = per_rank.get(rank)
            if buffer is None:
                buffer = per_rank[rank] = SeriesBuffer()
            room = MAX_SERIES_POINTS - buffer.count
            if len(rows) > room:
                buffer.truncated = True
                rows = rows[:room]
            if not len(rows):
                continue
            if indexes is None:
                index = np.arange(buffer.count, buffer.count + len(rows), dtype=np.float64)
            else:
                index = indexes[rows]
            table = np.empty((len(rows), SeriesBuffer.WIDTH), dtype=np.float64)
            table[:, 0] = values[rows]
            table[:, 1] = index
            table[:, 2] = times[rows]
            table[:, 3] = batch.file
            table[:, 4] = numbers[rows]
            table[:, 5] = offsets[rows]
            buffer.rows.frombytes(table.tobytes())
            buffer.count += len(rows)


def split_prefix(raw: bytes) -> tuple[Any, bytes]:
    """(rank, body) of a line through the shared paste-shape layer (prefixes.py): launcher, host,
    logger and timestamp prefixes are removed; rank None when none names one."""
    rank, body = prefixes.split_prefix(raw)
    return (rank_number(rank) if isinstance(rank, int) else rank), body


def _named(groups: list[tuple[str, int]], body: bytes, spans: Any) -> dict[str, Any]:
    """Named captures from RE2 spans, decoded leniently (groups that did not take part are left
    out)."""
    caps: dict[str, Any] = {}
    for name, number in groups:
        start, stop = spans[number]
        if start >= 0:
            caps[name] = body[start:stop].decode("utf-8", "replace")
    return caps


def _number(value: Any) -> float:
    """A capture as a float; NaN when it is missing, not a number, or too large for a float (a
    bad value skips that value, never the run)."""
    if value is None:
        return math.nan
    if isinstance(value, float):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return to_number(value)
    if math.isinf(number):
        return to_number(value)  # the word inf, or an overflow
    return number


def rank_number(value: Any) -> int | None:
    """A rank from its digits (bytes, text or an int); None when it is not a plausible rank
    (more than MAX_RANK_DIGITS digits: int() would refuse 4300 and more)."""
    if isinstance(value, int):
        return value if 0 <= value < 10**MAX_RANK_DIGITS else None
    if len(value) > MAX_RANK_DIGITS:
        return None
    try:
        return int(value)
    except ValueError:
        return None


_LONE_CR = re.compile(rb"\r(?!\n)")


def lone_cr_to_lf(data: bytes) -> bytes:
    """A CR not followed by LF ends a line (progress bars redraw with CR alone); replaced byte for
    byte, so offsets into the file stay true."""
    return _LONE_CR.sub(b"\n", data) if b"\r" in data else data


def unit_factor(unit: Any) -> float | None:
    """Multiplier to the base unit (0.0 marks 'string'); None for an unknown unit."""
    if unit == "string":
        return 0.0
    return factor(str(unit))


class GzipDamage(Exception):
    """A gzip stream is damaged after the data already handed out; the message says how."""


class _GzipStream:
    """Streaming gzip reader that hands out every byte decoded before damage (as zcat does), then
    raises GzipDamage: a truncated stream, corrupt deflate data, a CRC or length mismatch, or
    trailing garbage after the last member. gzip.GzipFile would drop the whole last read, and
    zlib's gzip mode loses the output of the call that meets a bad trailer, so the header and
    trailer are parsed here around a raw inflater. Output per read is bounded, so a decompression
    bomb cannot exhaust memory. Concatenated members (and NUL padding) are read as one stream."""

    CHUNK = 1 << 16
    MAX_HEADER = 1 << 16  # a file name or comment in the header longer than this is damage

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.pending = b""  # compressed input not yet consumed
        self.buffer = b""
        self.decoder: Any = None  # inside a member when set
        self.crc = 0
        self.size = 0
        self.members = 0
        self.finished = False
        self.damage: str | None = None

    def _fill(self, n: int) -> bool:
        """At least n bytes pending, unless the input ends first."""
        while len(self.pending) < n:
            more = self.raw.read(self.CHUNK)
            if not more:
                return False
            self.pending += more
        return True

    def _start_member(self) -> bool:
        """Parse a member header; False at a clean end of input (damage is recorded)."""
        while True:  # NUL padding between or after members (tape blocks, preallocated files)
            if not self._fill(1):
                return False
            self.pending = self.pending.lstrip(b"\x00")
            if self.pending:
                break
        if not self._fill(10) or self.pending[:3] != b"\x1f\x8b\x08":
            self.damage = (
                "trailing garbage after the gzip data" if self.members else "not gzip data"
            )
            return False
        flags = self.pending[3]
        at = 10
        if flags & 4:  # FEXTRA
            if not self._fill(at + 2):
                self.damage = "truncated gzip header"
                return False
            at += 2 + int.from_bytes(self.pending[at : at + 2], "little")
        for flag in (8, 16):  # FNAME, FCOMMENT: NUL-terminated
            if flags & flag:
                while (end := self.pending.find(b"\x00", at)) < 0:
                    if len(self.pending) > self.MAX_HEADER or not self._fill(len(self.pending) + 1):
                        self.damage = "truncated or oversized gzip header"
                        return False
                at = end + 1
        if flags & 2:  # FHCRC
            at += 2
        if not self._fill(at):
            self.damage = "truncated gzip header"
            return False
        self.pending = self.pending[at:]
        self.decoder = zlib.decompressobj(-zlib.MAX_WBITS)
        self.crc = 0
        self.size = 0
        return True

    def _end_member(self) -> bool:
        """Check a member's trailer (CRC-32 and length); False on damage."""
        self.pending = self.decoder.unused_data + self.pending
        self.decoder = None
        self.members += 1
        if not self._fill(8):
            self.damage = "truncated gzip stream (the trailer is missing)"
            return False
        crc, size = struct.unpack("<II", self.pending[:8])
        self.pending = self.pending[8:]
        if crc != self.crc or size != self.size & 0xFFFFFFFF:
            self.damage = "gzip CRC or length check failed"
            return False
        return True

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size and not self.finished:
            if self.decoder is None and not self._start_member():
                self.finished = True
                break
            if not self.pending and not self._fill(1):
                self.damage = "truncated gzip stream"
                self.finished = True
                break
            try:
                out = self.decoder.decompress(self.pending, size)
            except zlib.error as exc:
                self.damage = f"corrupt gzip data ({exc})"
                self.finished = True
                break
            self.pending = self.decoder.unconsumed_tail
            self.crc = zlib.crc32(out, self.crc)
            self.size += len(out)
            self.buffer += out
            if self.decoder.eof and not self._end_member():
                self.finished = True
        if not self.buffer and self.damage:
            damage, self.damage = self.damage, None
            raise GzipDamage(damage)
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def close(self) -> None:
        self.raw.close()


# Evidence is printed to terminals: control characters from a log (NUL, ANSI escapes) are shown
# as visible escapes instead of being replayed.
_CONTROL_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


def evidence_text(raw: bytes) -> str:
    """A log line as evidence: decoded leniently, bounded, control characters made visible."""
    text = raw[: EVIDENCE_TEXT * 4].decode("utf-8", "replace").rstrip("\r\n")
    return text.translate(_CONTROL_ESCAPES)[:EVIDENCE_TEXT]


class _Line:
    """A candidate line being matched; its text is decoded only when kept as evidence."""

    __slots__ = ("_t", "_text", "file", "number", "offset", "rank", "raw")

    def __init__(
        self, file_id: int, number: int, raw: bytes, rank: Any, t: float | None, offset: int
    ):
        self.file = file_id
        self.number = number
        self.raw = raw
        self.rank = rank
        self._t = t
        self.offset = offset
        self._text: str | None = None

    @property
    def t(self) -> float:
        """Unix time of the line (NaN without a timestamp), parsed on first use."""
        if self._t is None:
            self._t = parse_time(self.raw)
        return self._t

    def text(self) -> str:
        if self._text is None:
            self._text = evidence_text(self.raw)
        return self._text


_WORKER_ENGINE: Engine | None = None
# Candidate lines in a block after which one set match over the rest of the block (a few ms per
# MiB) pays for itself by sparing each later line its own set match (about a microsecond).
BLOCK_SET_AFTER = 2000
BLOCK_SET_EARLY = 200  # ... or after this many when they are dense (one line in 20 or more)
PARALLEL_MIN_BYTES = 64 << 20  # below this, process start-up costs more than it saves
SPLIT_MIN_BYTES = 64 << 20  # a plain file this large may be scanned in parts


@dataclass
class _Part:
    """What one worker found in one file (the mutable rule state, without the rules)."""

    states: list[tuple[dict[str, MatcherState], dict[str, dict[Any, SeriesBuffer]]]]
    skipped: list[Skipped]
    ranks_seen: set[Any]
    lines: int
    bytes: int


def _scan_one(
    file_id: int, display: str, source: Any, start: int = 0, end: int = -1, line: int = 1
) -> _Part:
    engine = _WORKER_ENGINE
    assert engine is not None
    runs = engine.new_runs()
    result = ScanResult(runs, [], [], set(), 0, 0)
    file_rank = rank_from_path(display)
    if file_rank is not None:
        result.ranks_seen.add(file_rank)
    part = (start, end, line) if end >= 0 else None
    try:
        engine._scan_file(source, display, file_id, file_rank, runs, result, part)
    except MemoryError:
        result.skipped.append(Skipped(display, "out of memory while reading; the rest was skipped"))
    return _Part(
        [(run.matchers, run.series) for run in runs],
        result.skipped,
        result.ranks_seen,
        result.lines,
        result.bytes,
    )


class _Range:
    """The next `size` bytes of a binary file, read as a stream."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle = handle
        self.left = size

    def read(self, size: int) -> bytes:
        data = self.handle.read(min(size, self.left)) if self.left > 0 else b""
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()


def _merge(result: ScanResult, part: _Part, continues: bool = False) -> None:
    """Fold one file's state into the whole scan (files arrive in input order). `continues`:
    the part continues the file of the previous part, so a rank's first line is the one already
    found, and series counted by position go on counting."""
    result.skipped.extend(part.skipped)
    result.ranks_seen |= part.ranks_seen
    result.lines += part.lines
    result.bytes += part.bytes
    merged: set[int] = set()  # shared series are merged once
    for run, (matchers, series) in zip(result.runs, part.states, strict=True):
        for name, found in matchers.items():
            state = run.matchers[name]
            state.count += found.count
            for rank, count in found.rank_counts.items():
                state.rank_counts[rank] = state.rank_counts.get(rank, 0) + count
            state.evidence.extend(
                found.evidence[: max(0, MAX_EVIDENCE_PER_MATCHER - len(state.evidence))]
            )
            for rank, key in found.first.items():
                if rank not in state.first or (
                    not continues and _order_key(key) < _order_key(state.first[rank])
                ):
                    state.first[rank] = key
            for column, values in found.columns.items():
                target = state.columns.setdefault(column, [])
                room = MAX_ROWS - len(target)
                target.extend(values[:room])
                state.truncated |= len(values) > room
            if found.events is not None:
                if state.events is None:
                    state.events = []
                state.events.extend(found.events[: max(0, MAX_ROWS - len(state.events))])
            state.truncated |= found.truncated
        for name, per_rank in series.items():
            target_series = run.series.setdefault(name, {})
            if id(target_series) in merged:
                continue
            merged.add(id(target_series))
            by_position = run.rule["series"].get(name, {}).get("index") is None
            for rank, buffer in per_rank.items():
                existing = target_series.get(rank)
                if existing is None:
                    target_series[rank] = buffer
                    continue
                existing.extend(buffer, shift_index=continues and by_position)


def _looks_binary(head: bytes) -> bool:
    """Binary, not a log: NUL bytes, many control characters, or mostly invalid UTF-8 at the start
    (a few NULs later in a log, from a crash, do not make it binary)."""
    if not head:
        return False
    if head.count(b"\x00") > len(head) // 200:
        return True
    controls = sum(1 for b in head if b < 9 or 13 < b < 32)
    if controls > len(head) // 10:
        return True
    invalid = head.decode("utf-8", "replace").count("\ufffd")
    return invalid > len(head) // 10


_MINUTES: dict[tuple[bytes, ...], float] = {}


def _iso_time(groups: tuple[bytes, ...]) -> float:
    y, mo, d, h, mi, s, frac = groups
    # Lines of one run share their minute: timegm runs once per minute seen. It is exact, as
    # timegm is integer arithmetic over the fields (seconds only add).
    key = (y, mo, d, h, mi)
    minute = _MINUTES.get(key)
    if minute is None:
        try:
            minute = float(calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), 0)))
        except (ValueError, OverflowError):
            minute = math.nan
        if len(_MINUTES) >= 100_000:
            _MINUTES.clear()
        _MINUTES[key] = minute
    if minute != minute:
        return math.nan
    return minute + int(s) + (float(b"0." + frac) if frac else 0.0)


def parse_time(text: bytes | str) -> float:
    """Unix time of the first ISO or glog timestamp in a line (NaN when there is none)."""
    if isinstance(text, str):
        text = text.encode("utf-8", "replace")
    found = _ISO.search(text, 0, 200)
    if found:
        return _iso_time(found.groups())
    found = _GLOG.search(text, 0, 200)
    if found:
        mo, d, h, mi, s, frac = found.groups()
        try:
            base = calendar.timegm((GLOG_YEAR, int(mo), int(d), int(h), int(mi), int(s)))
        except (ValueError, OverflowError):
            return math.nan
        return base + float(b"0." + frac)
    return math.nan


def rank_from_path(display: str) -> Any:
    """Rank from a file name (rank_3.log, rank3.log, probe-rank3.jsonl, 3.log), else a node
    label from a folder (node-2/...), else None."""
    parts = Path(display.replace("\\", "/")).parts
    if not parts:
        return None
    name = parts[-1]
    for suffix in (".gz",):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    found = _FILE_RANK.search(name)
    if found:
        return int(found.group(1))
    found = _FILE_NUMBER.match(name)
    if found and len(parts) > 1:
        return int(found.group(1))
    for folder in reversed(parts[:-1]):
        if _NODE.match(folder):
            return folder
        found = _FILE_RANK.search(folder)
        if found:
            return int(found.group(1))
    return None


# --- evaluation ------------------------------------------------------------------------------------


@dataclass
class RuleOutcome:
    rule: dict[str, Any]
    fired: bool
    confidence: float
    boosts: dict[str, float]
    detectors: dict[str, det.DetectorResult]
    evidence: list[Evidence]
    ranks: list[Any]
    initiating_rank: Any
    first_key: tuple[float, int, int]
    notes: list[str]
    error: str | None = None


class _Context:
    def __init__(self, run: RuleRun, results: dict[str, det.DetectorResult]):
        self.run = run
        self.results = results

    def truth(self, name: str) -> bool:
        if name in self.run.matchers:
            return self.run.matchers[name].count > 0
        return self.results[name].fired

    def count(self, name: str) -> float:
        if name in self.run.matchers:
            return float(self.run.matchers[name].count)
        return float(self.results[name].outputs.get("count", 0.0))

    def numbers(self, part: str, field_name: str) -> np.ndarray | float:
        if part in self.run.matchers:
            column = self.run.matchers[part].columns.get(field_name, [])
            return np.asarray([to_number(v) for v in column], dtype=float)
        return float(self.results[part].outputs.get(field_name, math.nan))

    def strings(self, part: str, field_name: str) -> list[str]:
        column = (
            self.run.matchers[part].columns.get(field_name, []) if part in self.run.matchers else []
        )
        return ["" if v is None else str(v) for v in column]


def _matcher_events(state: MatcherState) -> det.EventTable:
    events = state.events or []
    return det.EventTable(
        [e[0] for e in events],
        np.asarray([e[1] for e in events], dtype=float),
        np.asarray([e[2] for e in events], dtype=float),
        np.asarray([e[3] for e in events], dtype=np.int64),
        np.asarray([e[4] for e in events], dtype=np.int64),
        np.asarray([e[5] for e in events], dtype=np.int64),
    )


def evaluate(run: RuleRun, scan: ScanResult) -> RuleOutcome:
    rule = run.rule
    results: dict[str, det.DetectorResult] = {}
    notes: list[str] = []
    cooccur_hits: dict[str, tuple[det.EventTable, np.ndarray]] = {}
    for name in rule["detector_order"]:
        spec = rule["detectors"][name]
        kind = spec["kind"]
        if kind == "cooccur":
            tables = []
            for role in ("a", "b"):
                part = spec[role]
                if part in run.matchers:
                    tables.append(_matcher_events(run.matchers[part]))
                else:
                    tables.append(det.events_table(results[part].events))
            result, hits = det.cooccur(tables[0], tables[1], spec)
            cooccur_hits[name] = (tables[0], hits)
        else:
            buffers = run.series.get(spec["series"], {})
            series = {rank: buffer.points() for rank, buffer in buffers.items()}
            if kind == "correlation":
                other = {rank: b.points() for rank, b in run.series.get(spec["with"], {}).items()}
                result = det.correlation(series, other, spec)
            else:
                result = getattr(det, kind)(series, spec)
            if any(b.truncated for b in buffers.values()):
                notes.append(
                    f"series '{spec['series']}' reached {MAX_SERIES_POINTS:,} points on a rank; later points were not analysed"
                )
        results[name] = result
    context = _Context(run, results)
    fired = cond.evaluate(rule["condition_ast"], context) if "condition_ast" in rule else False
    boosts: dict[str, float] = {}
    for part, amount in rule["boost"].items():
        if context.truth(part):
            boosts[part] = amount
    confidence = min(0.99, max(0.01, rule["confidence"] + sum(boosts.values())))
    evidence: list[Evidence] = []
    ranks: set[Any] = set()
    first_key = (math.inf, 1 << 30, 1 << 30)
    if fired:
        for part in rule["report"]["evidence"]:
            if part in run.matchers:
                state = run.matchers[part]
                evidence.extend(state.evidence)
                ranks.update(state.rank_counts)
                for key in state.first.values():
                    first_key = min(first_key, _order_key(key))
            elif part in results:
                result = results[part]
                if not result.fired and part not in rule["report"]["evidence"][:1]:
                    continue
                ranks.update(result.ranks)
                if part in cooccur_hits:
                    table, hits = cooccur_hits[part]
                    for i in np.flatnonzero(hits)[:MAX_EVIDENCE_PER_MATCHER]:
                        evidence.append(
                            Evidence(
                                int(table.file[i]),
                                int(table.line[i]),
                                "",
                                table.rank[i],
                                float(table.t[i]),
                                part,
                                int(table.offset[i]),
                            )
                        )
                for event in result.events[:MAX_EVIDENCE_PER_MATCHER]:
                    evidence.append(
                        Evidence(
                            event.file, event.line, "", event.rank, event.t, part, event.offset
                        )
                    )
                    first_key = min(first_key, _order_key((event.t, event.file, event.line)))
                if result.note:
                    notes.append(f"{part}: {result.note}")
        for part, state in run.matchers.items():
            if state.truncated and part in rule["report"]["evidence"]:
                notes.append(
                    f"matcher '{part}' matched more than {MAX_ROWS:,} lines; later values were not compared"
                )
    ranks.discard(None)
    initiating = _initiating_rank(rule, run, results, scan) if fired else None
    return RuleOutcome(
        rule,
        fired,
        confidence,
        boosts,
        results,
        evidence,
        sorted(ranks, key=det.rank_sort_key),
        initiating,
        first_key,
        notes,
    )


def _order_key(key: tuple[float, int, int]) -> tuple[float, int, int]:
    t, file_id, line = key
    return (t if math.isfinite(t) else math.inf, file_id, line)


def _earliest_rank(firsts: dict[Any, tuple[float, int, int]]) -> Any:
    """Rank of the earliest line: by timestamp when they exist, else by line order when all in one
    file; None when the order cannot be told."""
    known = {rank: key for rank, key in firsts.items() if rank is not None}
    if not known:
        return None
    if len(known) == 1:
        return next(iter(known))
    timed = {rank: key for rank, key in known.items() if math.isfinite(key[0])}
    if len(timed) == len(known):
        return min(timed, key=lambda r: (timed[r][0], timed[r][1], timed[r][2]))
    files = {key[1] for key in known.values()}
    if len(files) == 1:
        return min(known, key=lambda r: known[r][2])
    return None


def _initiating_rank(
    rule: dict[str, Any], run: RuleRun, results: dict[str, det.DetectorResult], scan: ScanResult
) -> Any:
    how = rule["report"]["initiating_rank"]
    if how == "none":
        return None
    if how == "first":
        firsts: dict[Any, tuple[float, int, int]] = {}
        for part in rule["report"]["evidence"]:
            if part in run.matchers:
                for rank, key in run.matchers[part].first.items():
                    if rank not in firsts or _order_key(key) < _order_key(firsts[rank]):
                        firsts[rank] = key
        return _earliest_rank(firsts)
    ((kind, part),) = how.items()
    if kind == "matcher":
        return _earliest_rank(run.matchers[part].first)
    if kind == "detector":
        return results[part].rank if results[part].fired else None
    reporting = {r for r in run.matchers[part].rank_counts if r is not None}
    seen = {r for r in scan.ranks_seen if isinstance(r, int)}
    missing = sorted(seen - reporting)
    if reporting and len(missing) >= 1:
        return missing[0] if len(missing) == 1 else missing
    return None


def fill_evidence_text(outcomes: list[RuleOutcome], sources: dict[int, Any]) -> None:
    """Read the text of evidence lines known only by position (detector events): seek to the
    recorded byte offset (gzip streams seek by decompressing, bounded by the offset)."""
    for outcome in outcomes:
        for item in outcome.evidence:
            if item.text or item.offset < 0:
                continue
            source = sources.get(item.file)
            if not isinstance(source, (str, Path)) or str(source) == "-":
                continue
            try:
                with open(source, "rb") as raw:
                    head = raw.read(2)
                    raw.seek(0)
                    handle: Any = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw
                    handle.seek(item.offset)
                    line = handle.readline(MAX_LINE)
            except (OSError, EOFError, zlib.error):
                continue
            item.text = evidence_text(line.split(b"\r", 1)[0])  # a lone CR ended the line
