"""Tracebacks read as one unit: the parser behind the `traceback` matcher kind.

The lines of a traceback (rules/tracebacks.py names them) reach `step` one at a time, in line
order, per matcher, file and rank (interleaved ranks each build their own). A unit opens on
any traceback line but an exception (an excerpt may start mid-traceback), gathers its frames,
and ends on its exception line. A DataLoader worker's re-raise ("X: Caught X in DataLoader
worker process N." then "Original Traceback (most recent call last):") is one unit: the main
process's frames, then the worker's, ending in the worker's exception. C++ frames right after
an exception line (a c10::Error's message: "Exception raised from ..." and its frames) join
its unit.

A unit is judged when it is over: a new traceback starts on its file and rank, a line arrives
past its `max_lines`, or the input (or a block of it, for units that no later line can
reach) ends (`flush`). Then it matches its matcher when it holds every frame spec and its
exception, if the log shows one, is one the matcher names; a unit that never reached its
exception line matches on its frames alone, as a cut match (MatcherState.cut), which lowers
the confidence of a finding that rests on it (evaluation.py).

Judging a unit only when it is over keeps every scan alike: a parallel scan cuts a file only
where no unit can be open (parallel.no_open_block, by the openers of TracebackMatcher.opens),
and the serial scan flushes at the end of each block the units no later line can reach.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainwreck.engine import prefixes
from trainwreck.engine.lineinfo import split_prefix
from trainwreck.rules import regexes
from trainwreck.rules import tracebacks as tb
from trainwreck.rules.matchers import TRACEBACK_LINES, PatternRole, TracebackMatcher

if TYPE_CHECKING:
    from trainwreck.engine.matching import Line, Record
    from trainwreck.engine.patterns import PatternUse
    from trainwreck.engine.state import RuleRun


@dataclass(frozen=True)
class Frame:
    path: str | None
    function: str | None
    line: int  # its line in the log


@dataclass
class Unit:
    """One traceback as far as the log shows it."""

    start: int  # its first line in the log
    rank: Any
    frames: list[Frame] = field(default_factory=list)
    exception: str | None = None  # its type, when known (from a re-raise's "Caught X" too)
    message: str | None = None  # its message; None when cut before it
    worker: int | None = None  # the DataLoader worker that raised, for a re-raise
    done: bool = False  # its exception line was read
    reraise: bool = False  # inside a worker's re-raise, before its "Original Traceback"
    last: int = 0  # its last line read
    end: int = 0  # its exception line, once read
    lines: dict[int, Line] = field(default_factory=dict)  # its lines, for evidence

    @property
    def cut(self) -> bool:
        """Whether the log stops (or moves on) before its exception line."""
        return not self.done


def feed(
    unit: Unit | None, role: PatternRole, caps: dict[str, Any], number: int
) -> tuple[Unit | None, Unit | None]:
    """One traceback line into the unit open on its file and rank: (the unit now open, a unit
    this line ended before it, to judge)."""
    ended: Unit | None = None
    if role == PatternRole.TB_HEADER:
        if unit is not None and unit.reraise:
            unit.reraise = False  # the worker's original traceback goes on in this unit
        else:
            ended, unit = unit, Unit(number, None)
            # IPython's header names the type: known even when the excerpt stops before it.
            unit.exception = caps.get("tb_htype")
    elif role == PatternRole.TB_FRAME:
        path = next(
            (caps[k] for k in ("tb_path", "tb_rpath", "tb_ipath", "tb_i7path") if caps.get(k)),
            None,
        )
        function = next(
            (
                caps[k]
                for k in ("tb_function", "tb_rfunction", "tb_ifunction", "tb_i7function")
                if caps.get(k)
            ),
            None,
        )
        if unit is None or unit.done:
            ended, unit = unit, Unit(number, None)
        unit.frames.append(Frame(path, function, number))
    elif role == PatternRole.TB_CXX_FRAME:
        if unit is None:
            unit = Unit(number, None)
        if caps.get("tb_raised_function") is not None:
            path = caps.get("tb_raised_path")
            function = caps["tb_raised_function"]
            if path is not None and ":" in path:
                path = path.rsplit(":", 1)[0]  # (its line number)
        elif caps.get("tb_frame_text") is not None:
            text = caps["tb_frame_text"]
            path, function = tb.cxx_library(text), tb.cxx_function(text)
        else:
            where = caps.get("tb_cfile")
            path = where.rsplit(":", 1)[0] if where else None
            function = tb.cxx_function(caps.get("tb_cframe_text") or "")
        unit.frames.append(Frame(path, function, number))
    elif role == PatternRole.TB_EXCEPTION:
        if unit is None or unit.done:
            return unit, None  # an error line outside any traceback
        name = caps.get("tb_exception")
        message = caps.get("tb_message")
        if name is None:
            name, message = caps.get("tb_mexception"), caps.get("tb_mmessage")
            if name is None or tb.TYPE_SUFFIX.search(name):
                return unit, None  # (a usual type name: the EXCEPTION pattern reads this line)
        caught = tb.CAUGHT.match(message or "")
        if caught is not None and unit.worker is None:
            # The main process's re-raise: the worker's own traceback follows.
            unit.exception, unit.worker, unit.reraise = caught["type"], int(caught["worker"]), True
        else:
            unit.exception, unit.message, unit.done, unit.end = name, message, True, number
    elif role == PatternRole.TB_TERMINATE:
        if unit is None or unit.done:
            ended, unit = unit, Unit(number, None)
        unit.exception, unit.done, unit.end = caps.get("tb_cxx_exception"), True, number
    if unit is not None:
        unit.last = number
    return unit, ended


def judge(matcher: TracebackMatcher, unit: Unit) -> tuple[list[Frame], bool] | None:
    """Whether a unit matches: (the frames that meet the specs, first of each, whether it is a
    cut match), or None."""
    if unit.cut and not matcher.cut:
        return None
    met: list[Frame] = []
    for spec in matcher.specs():
        found = next((f for f in unit.frames if spec.matches(f.path, f.function)), None)
        if found is None:
            return None
        met.append(found)
    if not met:
        return None
    if (
        matcher.exception
        and unit.exception is not None
        and not tb.exception_matches(matcher.exception, unit.exception)
    ):
        return None
    if (
        matcher.message is not None
        and unit.message is not None
        and _message_pattern(matcher.message).search(unit.message) is None
    ):
        return None
    return met, unit.cut


# (a message pattern is compiled once, not once per traceback judged)
_message_pattern = functools.lru_cache(maxsize=256)(regexes.compile)


def captures(unit: Unit) -> dict[str, Any]:
    return {
        "exception": unit.exception,
        "message": unit.message,
        "worker": unit.worker,
        "frames": str(len(unit.frames)),
    }


# --- the runtime of the matcher kind (engine/matching.KINDS) -------------------------------------

Key = tuple[str, int, Any]  # (matcher, file, rank)


def step(use: PatternUse, caps: dict[str, Any], line: Line, run: RuleRun, record: Record) -> None:
    matcher = use.spec
    assert isinstance(matcher, TracebackMatcher) and use.role is not None
    key = (use.matcher, line.file, line.rank)
    unit = run.tracebacks.get(key)
    if unit is not None and line.number - unit.start + 1 > matcher.max_lines:
        _finish(run, use.matcher, unit, record)
        unit = None
        del run.tracebacks[key]
    unit, ended = feed(unit, use.role, caps, line.number)
    if ended is not None:
        del run.tracebacks[key]  # (the new unit goes after the units opened before it)
        _finish(run, use.matcher, ended, record)
    if unit is not None:
        if unit.rank is None:
            unit.rank = line.rank
        unit.lines[line.number] = line
        run.tracebacks[key] = unit


def flush(run: RuleRun, file_id: int, next_line: int | None, record: Record) -> None:
    """Judge the units of a file that no later line can join (all of them when `next_line` is
    None: the input ended), in the order they opened."""
    for key, unit in list(run.tracebacks.items()):
        if key[1] != file_id:
            continue
        matcher = run.rule.matchers[key[0]]
        assert isinstance(matcher, TracebackMatcher)
        if next_line is None or next_line - unit.start + 1 > matcher.max_lines:
            del run.tracebacks[key]
            _finish(run, key[0], unit, record)


def _finish(run: RuleRun, name: str, unit: Unit, record: Record) -> None:
    matcher = run.rule.matchers[name]
    assert isinstance(matcher, TracebackMatcher)
    verdict = judge(matcher, unit)
    if verdict is None:
        return
    met, cut = verdict
    # Evidence: the first frame that meets a spec, and the exception line (the last frame met,
    # for a cut match).
    first = unit.lines[met[0].line]
    last = unit.lines[unit.end] if not cut else unit.lines[max(f.line for f in met)]
    start = first.evidence(name, first.rank) if first is not last else None
    if cut:
        run.matchers[name].cut += 1
    record(run, name, captures(unit), last, start)


# --- the parser on its own, for a text ------------------------------------------------------------


def parse(text: str) -> Iterator[Unit]:
    """Every traceback unit in a text, per rank, in the order they end (for tests and tools:
    the scan reads the same lines through its patterns and `step`)."""
    compiled = [(role, regexes.compile(pattern)) for role, pattern in TRACEBACK_LINES]
    block = prefixes.normalize_block(text.encode())
    units: dict[Any, Unit] = {}
    number = 0
    for number, raw in enumerate(block.split(b"\n"), 1):
        rank, body = split_prefix(raw)
        decoded = body.decode("utf-8", "replace")
        for role, pattern in compiled:
            found = pattern.search(decoded)
            if found is None:
                continue
            unit, ended = feed(units.get(rank), role, found.groupdict(), number)
            if ended is not None:
                del units[rank]
                yield ended
            if unit is not None:
                unit.rank = rank
                units[rank] = unit
            break
    yield from units.values()
