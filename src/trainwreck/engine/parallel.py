"""Scanning large files in parallel: one forked process per file, or per part of one large
plain file, each scanning as a serial scan would; their states are merged in input order."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwreck.engine.lineinfo import SAMPLE_PREFIX, rank_number
from trainwreck.engine.reading import bom_encoding, read_blocks, read_head
from trainwreck.engine.state import (
    MAX_EVIDENCE_PER_MATCHER,
    MAX_ROWS,
    MatcherState,
    ScanResult,
    SeriesBuffer,
    thin_series,
)
from trainwreck.findings import Skipped
from trainwreck.rules.regex_internals import UNANCHORED

if TYPE_CHECKING:
    from trainwreck.engine.scanning import Engine

PARALLEL_MIN_BYTES = 64 << 20  # below this, process start-up costs more than it saves
SPLIT_MIN_BYTES = 64 << 20  # a plain file this large may be scanned in parts
# The engine of a parallel scan, inherited by the forked workers (compiled RE2 objects do not
# pickle).
_WORKER_ENGINE: Engine | None = None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container or `taskset`
    narrows), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers(inputs: list[tuple[str, Any]], jobs: int | None) -> int:
    """How many processes: one per file up to the usable CPUs (an explicit `jobs` is capped
    there too: more processes than CPUs only add start-up, memory and pickling), only for plain
    files, and (when automatic) only when there is enough input to repay starting them."""
    if jobs == 1 or not inputs:
        return 1
    import multiprocessing  # (here: a serial scan does not pay for importing it)

    if "fork" not in multiprocessing.get_all_start_methods():
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
    # A file of SPLIT_MIN_BYTES or more can be scanned in parts (see plan_parts).
    tasks = sum(max(1, size // SPLIT_MIN_BYTES) for size in sizes)
    cpus = usable_cpus()
    return max(1, min(cpus if jobs is None else jobs, cpus, tasks))


def scan_parallel(
    engine: Engine, inputs: list[tuple[str, Any]], workers: int, result: ScanResult
) -> None:
    global _WORKER_ENGINE
    _WORKER_ENGINE = engine
    # What every worker would otherwise work out on its own, done once before they fork.
    if not engine.prepared:
        sample = next((h for _, s in inputs if (h := read_head(s, 1 << 20))), None)
        if sample is not None:
            engine.prepare(sample)
    engine.shapes.prepare()
    budget = engine.series_budget
    engine.series_budget = budget // workers  # (the workers' copy: they fork from here)
    try:
        _scan_in_pool(engine, inputs, workers, result, budget)
    finally:
        engine.series_budget = budget
        _WORKER_ENGINE = None


# A task for the workers: (file id, display, source, byte range or None) of consecutive files,
# or one part of a cut file.
Task = list[tuple[int, str, Any, "tuple[int, int, int] | None"]]
TASKS_PER_WORKER = 4  # small files are grouped into about this many tasks per worker


def plan_tasks(
    engine: Engine, inputs: list[tuple[str, Any]], workers: int
) -> list[tuple[Task, list[bytes]]]:
    """The tasks of a parallel scan in input order, each with the rank prefixes to admit before
    it (those a serial scan samples from a cut file's blocks). With fewer files than workers, a
    large plain file is cut into parts, a task each. Otherwise consecutive files share a task
    until it holds 1 / (TASKS_PER_WORKER * workers) of the input: a task per small file costs
    more (a fresh state for every rule, pickled back and merged) than scanning it."""
    tasks: list[tuple[Task, list[bytes]]] = []
    if len(inputs) < workers:
        for file_id, (display, source) in enumerate(inputs):
            parts = plan_parts(engine, source, display, workers)
            if parts is None:
                tasks.append(([(file_id, display, source, None)], []))
                continue
            ranks, ranges = parts
            for index, piece in enumerate(ranges):
                tasks.append(([(file_id, display, source, piece)], ranks if index == 0 else []))
        return tasks
    sizes = []
    for _, source in inputs:
        try:
            sizes.append(os.path.getsize(source))
        except OSError:
            sizes.append(0)
    share = sum(sizes) / (TASKS_PER_WORKER * workers)
    task: Task = []
    held = 0
    for file_id, ((display, source), size) in enumerate(zip(inputs, sizes, strict=True)):
        task.append((file_id, display, source, None))
        held += size
        if held >= share:
            tasks.append((task, []))
            task, held = [], 0
    if task:
        tasks.append((task, []))
    return tasks


def _scan_in_pool(
    engine: Engine, inputs: list[tuple[str, Any]], workers: int, result: ScanResult, budget: int
) -> None:
    """Submit every group of files, or part of a file, to forked workers and merge what they
    find in input order, keeping the series within `budget`."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor  # (here: see workers)

    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        submitted = []
        for task, ranks in plan_tasks(engine, inputs, workers):
            for hit in ranks:
                result.admit_rank(rank_number(hit))
            submitted.append((task, pool.submit(_scan_task, task)))
        last_file = failed_file = -1
        for task, future in submitted:
            continues = task[0][0] == last_file  # the next part of a cut file
            if continues and task[0][0] == failed_file:
                continue  # an earlier part failed: the file was reported cut short there
            for file_id, display, _, _ in task:
                if file_id != last_file:
                    result.files.append(display)
                    last_file = file_id
            try:
                part = future.result()
            except Exception as exc:  # a worker killed (out of memory) or failing
                cut = task[0][3] is not None
                what = "was cut short" if cut else "could not be scanned"
                for _, display, _, _ in task:
                    result.skipped.append(Skipped(display, f"{what} ({exc!r}); skipped"))
                failed_file = task[0][0]
                continue
            merge(result, part, continues=continues)
            thin_series(result.runs, budget)


def plan_parts(
    engine: Engine, source: Any, display: str, workers: int
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
            head = handle.read(4)
            if head[:2] == b"\x1f\x8b" or bom_encoding(head):
                return None  # gzip, UTF-16 and UTF-32 are decoded from their start
    except OSError:
        return None
    scratch = ScanResult([], [], [], set(), 0, 0)
    starts: list[tuple[int, int]] = []  # (offset, line number) of each serial block
    ranks: list[bytes] = []  # sampled as a serial scan samples them, admitted in that order
    offset, line = 0, 1
    try:
        with open(source, "rb") as handle:
            for block in read_blocks(handle, display, scratch.skipped):
                starts.append((offset, line))
                if engine.missing_from:
                    ranks.extend(SAMPLE_PREFIX.findall(block[:65536]))
                offset += len(block)
                line += block.count(b"\n")
    except OSError:
        return None
    if scratch.skipped or offset != size:
        return None
    cuts: list[tuple[int, int]] = []
    wanted = 1
    for start, number in starts[1:]:
        if start >= wanted * size // count and no_open_block(engine, source, start):
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


def no_open_block(engine: Engine, source: Any, offset: int) -> bool:
    """Whether no multi-line matcher can be open at `offset` (a line start): for each span,
    no line among that many before it can open one (by the openers' prefilters)."""
    starts = engine.block_starts()
    if not starts:
        return True
    lines = max(span for span, _ in starts)
    window = min(offset, 4 << 20)
    try:
        with open(source, "rb") as handle:
            handle.seek(offset - window)
            data = handle.read(window)
    except OSError:
        return False
    if data.count(b"\n") < lines and window < offset:
        return False  # the window does not reach back far enough: do not cut here
    cut, counted = len(data), 0
    for span, search in starts:  # (shortest span first: each tail extends the last)
        for _ in range(span - counted):
            cut = data.rfind(b"\n", 0, cut - 1) if cut > 0 else -1
            if cut < 0:
                cut = 0
                break
        counted = span
        tail = data[cut:]
        if b"\r" in tail:
            return False  # a '$' before a CR line end: do not rely on the prefilters here
        if search.Match(UNANCHORED, tail, 0, len(tail))[0][0] >= 0:
            return False
    return True


@dataclass
class Part:
    """What one worker found in one file (the mutable rule state, without the rules)."""

    states: list[tuple[dict[str, MatcherState], dict[str, dict[Any, SeriesBuffer]]]]
    skipped: list[Skipped]
    ranks_seen: set[Any]
    lines: int
    bytes: int


def _scan_task(task: Task) -> Part:
    """Scan a task's files (or one part of a file) in a worker, as a serial scan of them would
    (Engine.scan_range): a file that fails is skipped with its reason and the others are still
    scanned; a part that fails raises, for the parent to report the file cut short."""
    engine = _WORKER_ENGINE
    assert engine is not None
    result = ScanResult(engine.new_runs(), [], [], set(), 0, 0)
    for file_id, display, source, part in task:
        engine.scan_range(source, display, file_id, part, into=result)
    runs = result.runs
    return Part(
        [(run.matchers, run.series) for run in runs],
        result.skipped,
        result.ranks_seen,
        result.lines,
        result.bytes,
    )


def merge(result: ScanResult, part: Part, continues: bool = False) -> None:
    """Fold one task's state into the whole scan (tasks arrive in input order). `continues`:
    the part continues the file of the previous part, so series counted by position go on
    counting."""
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
                # First seen in input order, as a serial scan keeps it (not the earliest time:
                # files need not be in time order, and evaluation compares times itself).
                state.first.setdefault(rank, key)
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
            state.cut += found.cut
        for name, per_rank in series.items():
            target_series = run.series.setdefault(name, {})
            if id(target_series) in merged:
                continue
            merged.add(id(target_series))
            spec = run.rule.series.get(name)
            by_position = spec is None or spec.index is None
            for rank, buffer in per_rank.items():
                existing = target_series.get(rank)
                if existing is None:
                    target_series[rank] = buffer
                    continue
                existing.extend(buffer, shift_index=continues and by_position)
