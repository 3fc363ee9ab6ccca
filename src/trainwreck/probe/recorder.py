"""The recorder behind `trainwreck.probe.Probe`.

Design constraints, in order of priority:

1. Never harm the training. Nothing here raises into the user's loop after construction: a
   folder that cannot be written or a disk that fills up turns into one `warnings.warn` and the
   probe stops recording. Memory is bounded (a ring buffer that drops the oldest events and counts
   them). The probe never imports torch; it only looks at `sys.modules` for a torch the user
   already imported.
2. Negligible overhead. The hot path (`with probe.step():`, the GC callback, `probe.log`) only
   reads a clock and appends a tuple to a deque; dict building, JSON encoding and file writes
   happen on a background thread (or in `flush()` / `close()`).
3. Thread-safe without locks on the hot path: `deque.append`, `deque.popleft` and
   `next(itertools.count())` are atomic in CPython, and the GC callback can run on any thread
   (including the writer's own), so taking a lock there could deadlock.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import itertools
import json
import math
import os
import socket
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

from trainwreck import __version__

SCHEMA_VERSION = 1
FILE_TEMPLATE = "probe-rank{rank}.jsonl"
# Fields every event carries; user metrics may not overwrite them.
RESERVED = frozenset({"v", "t", "rank", "event"})
# Lines encoded and written at a time: a producer that outpaces the writer must not grow the
# writer's own list (one drain takes at most what the buffer held when it began).
MAX_BATCH = 4096
# Strings (values, names, event names) are cut at this many characters: a 10 MB string must not
# become a 10 MB line (diagnose reads at most 64 KiB of a line anyway).
MAX_TEXT = 4096

# One encoder for all events: json.dumps with any keyword argument builds a new encoder per call,
# which costs more than the encoding itself.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str)

# Live probes, so that interpreter exit and fork can reach them without keeping them alive.
_LIVE: weakref.WeakSet[Probe] = weakref.WeakSet()


class ProbeWarning(UserWarning):
    """The probe stopped recording (or could not start); the training itself is unaffected."""


def detect_rank(environ: dict[str, str] | os._Environ[str] | None = None) -> tuple[int, int]:
    """(rank, world_size): torch.distributed when the user initialised it, else env, else (0, 1).

    torch is consulted only if it is already imported: importing it here would cost seconds and
    hundreds of MB in a process that may not use it.
    """
    environ = os.environ if environ is None else environ
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size())
        except Exception:  # a half-torn-down process group must not stop the probe
            pass
    rank = _env_int(environ, "RANK")
    if rank is None:
        rank = _env_int(environ, "LOCAL_RANK")
    world = _env_int(environ, "WORLD_SIZE")
    return (rank if rank is not None else 0), (world if world is not None and world > 0 else 1)


def _env_int(environ: Any, name: str) -> int | None:
    value = environ.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number >= 0 else None


def _int_or(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except Exception:
        return default


def _float_or(value: Any, default: float) -> float:
    try:
        number = float(value)
    except Exception:
        return default
    return number if math.isfinite(number) else default


def _cuda_stats() -> dict[str, int] | None:
    """Allocator counters of the current CUDA device, or None when CUDA is not in use.

    Only when the user imported torch and CUDA is already initialised: calling into CUDA from
    here would otherwise create a context (hundreds of MB of GPU memory) on a CPU-only run.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if not cuda.is_initialized():
            return None
        device = cuda.current_device()
        stats = cuda.memory_stats(device)
    except Exception:
        return None
    return {
        "device": int(device),
        "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
        "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
        "inactive_split_bytes": int(stats.get("inactive_split_bytes.all.current", 0)),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "ooms": int(stats.get("num_ooms", 0)),
        "segments": int(stats.get("segment.all.current", 0)),
    }


def _scalar(value: Any) -> Any:
    """A JSON-safe scalar for a user metric. Tensors and numpy scalars become Python numbers here,
    in the caller's thread, so the buffer never keeps a tensor (or its autograd graph) alive.
    Never raises: what cannot be converted is recorded as text, or by its type name."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _bounded(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _non_finite(value)
    try:
        item = getattr(value, "item", None)
        number = item() if callable(item) else float(value)
    except Exception:
        return _text(value)
    if isinstance(number, bool):
        return number
    if isinstance(number, int):
        return _integer(number)
    try:
        number = float(number)
    except Exception:
        return _text(number)
    return number if math.isfinite(number) else _non_finite(number)


def _integer(value: int) -> Any:
    """An int JSON readers take: a float beyond 64 bits (json refuses to print more than 4300
    digits, and most readers overflow long before), 'Infinity' beyond a float."""
    if -(1 << 63) <= value < (1 << 63):
        return int(value)
    try:
        return float(value)
    except OverflowError:
        return "Infinity" if value > 0 else "-Infinity"


def _bounded(text: str) -> str:
    """`text`, cut at MAX_TEXT characters with a note of how long it was."""
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}... [cut: {len(text):,} characters, the first {MAX_TEXT:,} kept]"


def _text(value: Any) -> str:
    try:
        return _bounded(str(value))
    except Exception:
        try:
            name = type(value).__name__
        except Exception:
            name = "object"
        return f"<unprintable {name}>"


def _warn(message: str) -> None:
    """warnings.warn that never raises (under `python -W error` it would, from anywhere)."""
    with contextlib.suppress(Exception):
        warnings.warn(message, ProbeWarning, stacklevel=4)


def _non_finite(value: float) -> str:
    # NaN/inf are not JSON; these spellings are what float() reads back.
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _seconds(t_ns: int) -> str:
    """Unix nanoseconds as a JSON number of seconds with microsecond resolution."""
    seconds, rest = divmod(t_ns, 1_000_000_000)
    return f"{seconds}.{rest // 1000:06d}"


def _millis(ns: int) -> str:
    """A non-negative duration in nanoseconds as milliseconds with 0.1 us resolution."""
    whole, rest = divmod(max(0, ns), 1_000_000)
    return f"{whole}.{rest // 100:04d}"


def _rest(fields: dict[str, Any]) -> str:
    """The fields of an event after the envelope: ',"a":1,"b":2}' (or '}' when there are none)."""
    body = _ENCODER.encode(fields)
    return "}" if body == "{}" else "," + body[1:]


class _NullStep:
    """What `step()` returns once the probe is closed or failed: does nothing, costs nothing."""

    __slots__ = ()

    def __enter__(self) -> _NullStep:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


_NULL_STEP = _NullStep()


class _Step:
    """One timed step. Kept tiny: it is created and entered once per training step."""

    __slots__ = ("_gc0", "_probe", "_start", "number")

    def __init__(self, probe: Probe, number: int) -> None:
        self._probe = probe
        self.number = number
        self._start = 0
        self._gc0 = 0

    def __enter__(self) -> _Step:
        self._gc0 = self._probe._gc_ns
        self._start = time.perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        end = time.perf_counter_ns()
        probe = self._probe
        if not probe._active:  # closed or failed mid-step: keep the buffer empty
            return False
        error = None if exc_type is None else _bounded(exc_type.__name__)
        probe._put(
            (
                "step",
                time.time_ns(),
                self.number,
                end - self._start,
                probe._gc_ns - self._gc0,
                error,
            )
        )
        every = probe.cuda_every
        # A failing step (a CUDA OOM, typically) gets its allocator state regardless of period.
        if every and (error is not None or self.number % every == 0):
            probe._record_cuda(self.number)
        if error is not None:
            probe._wake.set()  # the process may be about to die: flush now
        return False  # never swallow the user's exception


class Probe:
    """Records step times, GC pauses, CUDA allocator state and user metrics as JSON lines.

    >>> probe = Probe("runs/exp1")            # writes runs/exp1/probe-rank{R}.jsonl
    >>> with probe.step():                    # doctest: +SKIP
    ...     train_step(batch)
    >>> probe.log(loss=0.5)                   # doctest: +SKIP
    >>> probe.close()                         # also at interpreter exit; idempotent
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        cuda_every: int | None = 50,
        gc_min_ms: float = 1.0,
        record_gc: bool = True,
        max_buffer: int = 65_536,
        flush_interval: float = 1.0,
    ) -> None:
        """
        path: folder for the run (created if missing); this rank writes probe-rank{R}.jsonl there,
            appending, so nothing a previous run wrote is lost.
        rank, world_size: override detection (torch.distributed, then RANK / LOCAL_RANK /
            WORLD_SIZE, then 0 and 1).
        cuda_every: record a cuda_memory event every N steps (and on a step that raised), only
            when the user's torch has initialised CUDA; 0 or None disables it.
        gc_min_ms: generation 0 and 1 collections shorter than this are not recorded as events
            (there can be hundreds per second); generation 2 collections always are. Every pause
            still counts towards the step event's gc_ms.
        record_gc: install the gc.callbacks hook at all.
        max_buffer: events held in memory before the oldest are dropped (and counted).
        flush_interval: seconds between background writes.
        """
        detected_rank, detected_world = detect_rank()
        # A bad argument falls back to its default: the probe must never stop the training.
        self.rank = _int_or(rank, detected_rank)
        self.world_size = _int_or(world_size, detected_world)
        self.cuda_every = _int_or(cuda_every or 0, 50)
        self.gc_min_ms = _float_or(gc_min_ms, 1.0)
        self.flush_interval = max(0.01, _float_or(flush_interval, 1.0))
        try:
            folder: Path | None = Path(path)
        except TypeError:
            folder = None
        self.path = (folder or Path(_text(path))) / FILE_TEMPLATE.format(rank=self.rank)

        self._buffer: deque[tuple[Any, ...]] = deque(maxlen=max(16, _int_or(max_buffer, 65_536)))
        self._high_water = self._buffer.maxlen // 2 if self._buffer.maxlen else 1
        self._issued = itertools.count()  # events offered to the buffer (next() is atomic)
        self._written = 0  # events written to the file
        self._next_step = 0
        self._step_lock = threading.Lock()
        self._write_lock = threading.Lock()  # writer thread vs flush()/close() in the caller
        self._close_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._gc_ns = 0  # total GC pause so far in this process, for step events
        self._gc_start = 0
        self._gc_min_ns = int(self.gc_min_ms * 1e6)
        self._gc_installed = False
        self._active = False  # recording
        self._closed = False
        self._warned = False
        self._pid = os.getpid()
        self._file: Any = None
        self._thread: threading.Thread | None = None

        if folder is None:
            self._fail(f"path must be a str or os.PathLike, not {type(path).__name__}")
            self._closed = True
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Unbuffered binary append: one write() per batch of lines and no user-space buffer
            # a forked child could flush a second time.
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 (held until close)
        except (OSError, ValueError) as error:  # ValueError: a NUL in the path
            self._fail(f"cannot write {self.path!r}: {error}")
            self._closed = True
            return

        try:
            self._active = True
            _LIVE.add(self)
            self._put(("start", time.time_ns(), self._start_fields()))
            if record_gc:
                gc.callbacks.append(self._on_gc)
                self._gc_installed = True
            self._thread = threading.Thread(
                target=self._run, name=f"trainwreck-probe-rank{self.rank}", daemon=True
            )
            self._thread.start()
        except Exception as error:  # no thread left to start one, for instance
            self._fail(f"cannot start recording: {error!r}")
            self._closed = True

    # --- public API -------------------------------------------------------------------------

    def step(self, step: int | None = None) -> _Step | _NullStep:
        """Context manager timing one training step; `step` overrides the running counter."""
        if not self._active:
            return _NULL_STEP
        explicit: int | None = None
        if step is not None:
            try:
                explicit = int(step)
            except Exception:  # TypeError, ValueError, OverflowError (inf): use the counter
                explicit = None
        with self._step_lock:
            number = self._next_step if explicit is None else explicit
            self._next_step = number + 1
        return _Step(self, number)

    def log(self, **values: Any) -> None:
        """Record a metric event: `probe.log(loss=0.42, tokens_per_s=1.2e5)`.

        The event carries `step` (the last step entered, unless given as `step=`). Tensors are
        converted with .item() here (on CUDA that synchronises, as any logging of them does).
        """
        if not self._active:
            return
        fields: dict[str, Any] = {}
        for name, value in values.items():
            if name in RESERVED:
                continue  # would corrupt the envelope; documented
            fields[_bounded(name)] = _scalar(value)
        if "step" not in fields and self._next_step > 0:
            fields["step"] = self._next_step - 1
        self._put(("metric", time.time_ns(), fields))

    def event(self, name: str, **fields: Any) -> None:
        """Record a custom event (for integrations); the schema accepts any other event name."""
        if not self._active:
            return
        clean = {
            _bounded(key): _scalar(value) for key, value in fields.items() if key not in RESERVED
        }
        self._put(("custom", time.time_ns(), _text(name), clean))

    def flush(self) -> None:
        """Write buffered events now, in this thread. Never raises."""
        self._drain()

    def close(self, reason: str = "close", error: str | None = None) -> None:
        """Stop recording, write everything buffered and an `end` event. Idempotent, never raises.

        reason: "close" (explicit), "exit" (interpreter exit) or "exception"; error: the name of
        the exception type that ended the run, when known.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._remove_gc_hook()
        was_active = self._active
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            with contextlib.suppress(Exception):
                thread.join(timeout=5.0)
        if was_active:
            while self._buffer and self._file is not None:  # every batch, not one drain
                self._drain()
            # Read the counter last so that every event offered before is accounted for.
            issued = next(self._issued)
            dropped = max(0, issued - self._written - len(self._buffer))
            self._active = False
            with contextlib.suppress(Exception):
                self._put_end(reason, dropped, error)
        self._active = False
        self._close_file()
        _LIVE.discard(self)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def recording(self) -> bool:
        """False once closed, or after a write failure stopped it."""
        return self._active

    def __enter__(self) -> Probe:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc_type is None:
            self.close("close")
        else:
            self.close("exception", exc_type.__name__)
        return False

    def __repr__(self) -> str:
        state = "recording" if self._active else "closed" if self._closed else "stopped"
        return f"Probe({str(self.path)!r}, rank={self.rank}, {state})"

    # --- hot path -----------------------------------------------------------------------------

    def _put(self, record: tuple[Any, ...]) -> None:
        next(self._issued)
        buffer = self._buffer
        buffer.append(record)  # full deque drops its oldest record; counted at close
        if len(buffer) >= self._high_water:
            self._wake.set()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # Runs inside the collector, on whichever thread triggered it: no locks, no I/O.
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
            return
        duration = time.perf_counter_ns() - self._gc_start
        self._gc_ns += duration
        generation = info.get("generation", 0)
        if self._active and (generation >= 2 or duration >= self._gc_min_ns):
            self._put(
                (
                    "gc",
                    time.time_ns(),
                    generation,
                    duration,
                    info.get("collected", 0),
                    info.get("uncollectable", 0),
                )
            )

    def _record_cuda(self, step: int) -> None:
        try:
            stats = _cuda_stats()
        except Exception:  # odd values from a half-initialised CUDA
            return
        if stats is not None:
            stats["step"] = step
            self._put(("cuda_memory", time.time_ns(), stats))

    # --- writer -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            self._drain()

    def _drain(self) -> None:
        """Write what the buffer holds now, MAX_BATCH lines at a time. Events offered meanwhile
        wait for the next drain: a producer faster than the disk (hundreds of thousands of empty
        steps a second) then drops its oldest events in the bounded buffer, and nothing else
        grows."""
        with self._write_lock:
            buffer = self._buffer
            todo = len(buffer)
            while todo > 0 and self._file is not None:
                lines: list[str] = []
                while todo > 0 and len(lines) < MAX_BATCH:
                    todo -= 1
                    try:
                        record = buffer.popleft()
                    except IndexError:
                        todo = 0
                        break
                    try:
                        lines.append(self._encode(record))
                    except Exception:  # an unencodable event is skipped, never fatal
                        continue
                if lines:
                    self._write(lines)

    def _encode(self, record: tuple[Any, ...]) -> str:
        # Times are kept as integer nanoseconds and printed with integer arithmetic: float repr
        # and round() go through dtoa and were most of the writer's CPU time.
        kind = record[0]
        head = f'{{"v":{SCHEMA_VERSION},"t":{_seconds(record[1])},"rank":{self.rank},"event":'
        if kind == "step":
            _, _, number, duration_ns, gc_ns, error = record
            line = (
                f'{head}"step","step":{number},"duration_ms":{_millis(duration_ns)},'
                f'"gc_ms":{_millis(gc_ns)}'
            )
            if error is not None:
                line += ',"error":' + _ENCODER.encode(error)
            return line + "}"
        if kind == "gc":
            _, _, generation, duration_ns, collected, uncollectable = record
            return (
                f'{head}"gc","generation":{int(generation)},"duration_ms":{_millis(duration_ns)},'
                f'"collected":{int(collected)},"uncollectable":{int(uncollectable)}}}'
            )
        if kind == "custom":
            return head + _ENCODER.encode(record[2]) + _rest(record[3])
        # metric, cuda_memory, start, end: fields prepared by the producer
        return f'{head}"{kind}"' + _rest(record[2])

    def _write(self, lines: list[str]) -> None:
        data = ("\n".join(lines) + "\n").encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                written = self._file.write(view)
                if written is None:  # non-blocking file: treat as a failed write
                    raise OSError("write returned None")
                view = view[written:]
        except (OSError, ValueError) as error:
            self._fail(f"writing {self.path} failed ({error}); recording stopped")
            return
        self._written += len(lines)

    def _put_end(self, reason: str, dropped: int, error: str | None) -> None:
        fields: dict[str, Any] = {"reason": reason, "events": self._written, "dropped": dropped}
        if error is not None:
            fields["error"] = error
        line = self._encode(("end", time.time_ns(), fields))
        with self._write_lock:
            if self._file is not None:
                self._write([line])

    # --- failure and teardown -----------------------------------------------------------------

    def _fail(self, message: str) -> None:
        """Stop recording for good, warn once. Called with or without the write lock held."""
        self._active = False
        self._remove_gc_hook()
        self._buffer.clear()
        self._stop.set()
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(Exception):
                file.close()
        if not self._warned:
            self._warned = True
            _warn(f"trainwreck.probe: {message}")

    def _remove_gc_hook(self) -> None:
        if self._gc_installed:
            self._gc_installed = False
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self._on_gc)

    def _close_file(self) -> None:
        with self._write_lock:
            file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(Exception):
                file.close()

    def _start_fields(self) -> dict[str, Any]:
        try:
            host = socket.gethostname()
        except OSError:
            host = ""
        local = _env_int(os.environ, "LOCAL_RANK")
        return {
            "world_size": self.world_size,
            "local_rank": local,
            "pid": self._pid,
            "host": host,
            "python": ".".join(str(part) for part in sys.version_info[:3]),
            "probe": __version__,
            "cuda_every": self.cuda_every,
            "gc_min_ms": self.gc_min_ms,
        }

    def _abandon(self) -> None:
        """In a forked child: the parent owns the file; stop quietly without writing a byte."""
        self._closed = True
        self._active = False
        self._remove_gc_hook()
        self._buffer.clear()
        self._thread = None  # threads do not survive fork
        self._file = None  # the parent's descriptor copy is closed when the child exits


def _close_all_at_exit() -> None:
    # sys.last_value is set when an uncaught exception was printed: the loop died of it.
    last = getattr(sys, "last_value", None)
    reason, error = (
        ("exception", _bounded(type(last).__name__)) if last is not None else ("exit", None)
    )
    for probe in list(_LIVE):
        probe.close(reason, error)


def _after_fork_in_child() -> None:
    for probe in list(_LIVE):
        probe._abandon()
    _LIVE.clear()


atexit.register(_close_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
