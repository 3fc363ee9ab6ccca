"""Flight Recorder dumps: recognised by content, loaded as data only, normalised to typed records.

A dump is what c10d's Flight Recorder writes for one rank: a pickle (`_dump_fr_trace()`, the file
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` + rank that `TORCH_NCCL_DUMP_ON_TIMEOUT=1` writes) or JSON
(`_dump_fr_trace_json()`), a mapping with "version" ("2.x"), "pg_config", "pg_status",
"comm_lib_version" and "entries". Field names are those of torch 2.13's dumps and of its own
reader (torch/distributed/flight_recorder/components/loader.py and types.py).

A pickle is untrusted input (invariant 7): `SafeUnpickler.find_class` refuses every global, so
no pickle handed in can name a callable, and REDUCE / BUILD have nothing to call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.errors import ProblemsFound
from trainwreck.forensics import fastread

MAX_DUMP_BYTES = 1 << 30  # a dump larger than this is refused before it is read
SNIFF_BYTES = 4096
# pickle protocols 2 to 5 open with PROTO n; torch writes protocol 2.
_PICKLE_HEADERS = tuple(bytes((0x80, n)) for n in range(2, 6))
_JSON_KEYS = (b'"entries"', b'"version"')
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.[A-Za-z]+)?$")


class DumpError(ProblemsFound):
    """A dump that cannot be read (refused, truncated, not a dump): one line, with its file."""


def sniff(head: bytes) -> str | None:
    """ "pickle" or "json" when the first bytes of a file look like a Flight Recorder dump."""
    if head.startswith(_PICKLE_HEADERS):
        return "pickle"
    stripped = head.lstrip()
    if stripped.startswith(b"{") and all(key in head for key in _JSON_KEYS):
        return "json"
    return None


class Refused(pickle.UnpicklingError):
    """A pickle that names a global or a persistent id: refused before anything is called."""


class SafeUnpickler(pickle.Unpickler):
    """Admits plain containers and scalars only: every global is refused, so nothing runs."""

    def find_class(self, module: str, name: str) -> Any:
        raise Refused(f"refused global '{module}.{name}' (dumps are data only)")

    def persistent_load(self, pid: Any) -> Any:
        raise Refused("refused a persistent id (dumps are data only)")


class _WholeBuffer:
    """The bytes of a dump as the file SafeUnpickler reads: `peek` hands the C unpickler all of
    it at once (_pickle.c prefetches through peek), so it parses from memory as fast as
    `pickle.loads`; through io.BytesIO it measured twice as slow."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def peek(self, size: int = 0) -> bytes:
        return self._data[self._at :]

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else min(self._at + size, len(self._data))
        chunk = self._data[self._at : end]
        self._at = end
        return chunk

    def readinto(self, buffer: Any) -> int:
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def readline(self) -> bytes:
        newline = self._data.find(b"\n", self._at)
        return self.read(-1 if newline < 0 else newline + 1 - self._at)


_UNPICKLE_HEADROOM = 512 << 20


@contextlib.contextmanager
def _memory_bounded(extra: int) -> Iterator[None]:
    """Address space for what follows capped at `extra` bytes over today's (Linux; elsewhere
    nothing is capped). The C unpickler sizes its memo to the largest index a stream names: 14
    bytes asking for slot 10**9 took 15 GB and 18 s. Under the cap that allocation fails at
    once, as MemoryError, which load_bytes words. A walk that checks every index first cost ten
    times the unpickling, so the cap is the cheap guard."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm", "rb") as statm:
            in_use = int(statm.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError, ValueError, IndexError):
        yield
        return
    cap = in_use + extra
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # already capped tighter by the user: leave their limit alone
        return
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load_bytes(data: bytes, file: str) -> dict[str, Any]:
    """The dump's mapping, from pickle or JSON bytes; DumpError with a reason otherwise."""
    kind = sniff(data[:SNIFF_BYTES])
    if kind is None:
        raise DumpError(
            "not a Flight Recorder dump (neither a pickle nor JSON with entries)", file=file
        )
    try:
        if kind == "pickle":
            with _memory_bounded(_UNPICKLE_HEADROOM + 64 * len(data)):
                raw = SafeUnpickler(_WholeBuffer(data)).load()
        else:
            raw = json.loads(data)
    except Refused as exc:
        raise DumpError(f"pickle refused: {exc}", file=file) from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        OverflowError,
        MemoryError,  # a memo index of 2**32 - 1 makes the C unpickler size its memo to it
        AttributeError,  # APPEND onto a dict: the C unpickler calls its missing .append
    ) as exc:
        if isinstance(exc, MemoryError):
            raise DumpError(
                f"unreadable {kind} dump: it asks for more memory than {len(data)} bytes of "
                "dump can need (a memo index or size beyond the file)",
                file=file,
            ) from None
        reason = "truncated" if isinstance(exc, EOFError) else type(exc).__name__
        raise DumpError(
            f"unreadable {kind} dump ({reason}: {exc}) of {len(data)} bytes", file=file
        ) from None
    except RecursionError:
        raise DumpError(f"{kind} dump nested too deeply", file=file) from None
    if not isinstance(raw, dict) or "entries" not in raw:
        raise DumpError(f"{kind} file is not a Flight Recorder dump (no 'entries')", file=file)
    return raw


def _int(value: Any, default: int = -1) -> int:
    """An integer field; JSON dumps write pg_status counters as strings ("6")."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(
        tuple(_int(d) for d in shape) if isinstance(shape, (list, tuple)) else (_int(shape),)
        for shape in value
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame a Flight Recorder entry recorded (pickle dumps only carry them)."""

    filename: str
    line: int
    name: str

    @classmethod
    def from_dict(cls, raw: Any) -> Frame | None:
        if not isinstance(raw, dict):
            return None
        return cls(str(raw.get("filename", "?")), _int(raw.get("line")), str(raw.get("name", "?")))

    def label(self) -> str:
        return f"{self.name} ({Path(self.filename).name}:{self.line})"


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of a rank's ring buffer: a collective or p2p op as that rank enqueued it."""

    record_id: int
    pg_id: int
    pg_name: str  # process_group[0]
    pg_desc: str  # process_group[1], e.g. "default_pg"
    collective_seq_id: int
    p2p_seq_id: int
    profiling_name: str  # "nccl:all_reduce", "gloo:barrier", "nccl:send 1->2"
    is_p2p: bool
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str  # scheduled / started / completed
    retired: bool
    time_created_ns: int
    timeout_ms: int
    frames: tuple[Frame, ...]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Record:
        group = raw.get("process_group")
        name, desc = (
            (str(group[0]), str(group[1]))
            if isinstance(group, (list, tuple)) and len(group) == 2
            else (str(raw.get("pg_id", "")), "")
        )
        frames = raw.get("frames")
        return cls(
            record_id=_int(raw.get("record_id")),
            pg_id=_int(raw.get("pg_id")),
            pg_name=name,
            pg_desc=desc,
            collective_seq_id=_int(raw.get("collective_seq_id")),
            p2p_seq_id=_int(raw.get("p2p_seq_id")),
            profiling_name=str(raw.get("profiling_name", "")),
            is_p2p=bool(raw.get("is_p2p", False)),
            input_sizes=_shapes(raw.get("input_sizes")),
            output_sizes=_shapes(raw.get("output_sizes")),
            input_dtypes=_strings(raw.get("input_dtypes")),
            output_dtypes=_strings(raw.get("output_dtypes")),
            state=str(raw.get("state", "")),
            retired=bool(raw.get("retired", False)),
            time_created_ns=_int(raw.get("time_created_ns"), 0),
            timeout_ms=_int(raw.get("timeout_ms"), 0),
            frames=tuple(f for f in map(Frame.from_dict, frames) if f)
            if isinstance(frames, list)
            else (),
        )

    @property
    def op(self) -> str:
        """The operation without its backend prefix or p2p peers: "all_reduce", "send"."""
        return self.profiling_name.partition(":")[2].split(" ")[0] or self.profiling_name

    @property
    def backend(self) -> str:
        return self.profiling_name.partition(":")[0]

    def peers(self) -> tuple[int, int] | None:
        """(src, dst) group ranks of a p2p op, from "send 1->2" / "recv 3<-0"."""
        meta = self.profiling_name.partition(" ")[2]
        try:
            if "->" in meta:
                src, dst = meta.split("->")
                return int(src), int(dst)
            if "<-" in meta:
                dst, src = meta.split("<-")
                return int(src), int(dst)
        except ValueError:
            return None
        return None

    def signature(self) -> tuple[Any, ...]:
        """What every rank must agree on for one collective: op, sizes and dtypes."""
        return (self.op, self.input_sizes, self.output_sizes, self.input_dtypes, self.output_dtypes)

    def describe(self) -> str:
        sizes = ",".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes) or "-"
        dtypes = ",".join(self.input_dtypes) or "-"
        return f"{self.profiling_name} #{self.collective_seq_id} sizes [{sizes}] {dtypes} ({self.state})"


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """pg_status of one process group: the last collective enqueued, started and completed."""

    enqueued: int
    started: int
    completed: int

    @classmethod
    def from_dict(cls, raw: Any) -> GroupStatus:
        raw = raw if isinstance(raw, dict) else {}
        return cls(
            _int(raw.get("last_enqueued_collective")),
            _int(raw.get("last_started_collective")),
            _int(raw.get("last_completed_collective")),
        )


@dataclass(frozen=True, slots=True)
class Dump:
    """One rank's Flight Recorder dump, normalised."""

    file: str
    kind: str  # "pickle" / "json"
    rank: int | None
    version: str
    comm_lib_version: str
    group_ranks: dict[str, tuple[int, ...]]  # pg_config: group name (and desc) -> its ranks
    status: dict[int, GroupStatus]  # pg_status by pg_id
    records: tuple[Record, ...]
    bad_entries: int  # entries that were not mappings

    @classmethod
    def from_dict(
        cls, raw: dict[str, Any], file: str, kind: str, rank: int | None, *, records: bool = True
    ) -> Dump:
        """The typed dump; `records=False` reads the header only (the analysis reads entries
        into compact arrays itself, traces.trace)."""
        entries = raw.get("entries")
        entries = entries if isinstance(entries, list) else []
        typed = (
            tuple(Record.from_dict(e) for e in entries if isinstance(e, dict)) if records else ()
        )
        groups: dict[str, tuple[int, ...]] = {}
        config = raw.get("pg_config")
        for key, value in config.items() if isinstance(config, dict) else ():
            if isinstance(value, dict):
                ranks = _rank_list(value.get("ranks"))
                groups[str(key)] = ranks
                if value.get("desc"):
                    groups.setdefault(f"desc:{value['desc']}", ranks)
        status_raw = raw.get("pg_status")
        status = {
            _int(k): GroupStatus.from_dict(v)
            for k, v in (status_raw.items() if isinstance(status_raw, dict) else ())
        }
        return cls(
            file=file,
            kind=kind,
            rank=_rank_field(raw) if _rank_field(raw) is not None else rank,
            version=str(raw.get("version", "")),
            comm_lib_version=str(raw.get("comm_lib_version", "")),
            group_ranks=groups,
            status=status,
            records=typed,
            bad_entries=len(entries) - list(map(type, entries)).count(dict),
        )


def _rank_list(value: Any) -> tuple[int, ...]:
    """pg_config's "ranks" is the text of a list ("[0, 1, 2]"); read it without eval."""
    if isinstance(value, (list, tuple)):
        return tuple(_int(v) for v in value)
    if isinstance(value, str):
        return _parse_ranks(value)
    return ()


@functools.lru_cache(maxsize=1024)
def _parse_ranks(text: str) -> tuple[int, ...]:
    """Parsed once per distinct text: 4096 dumps all list the default group's 4096 ranks, and
    one shared tuple instead of 4096 copies saves 600 MB."""
    return tuple(int(n) for n in re.findall(r"-?\d+", text))


def _rank_field(raw: dict[str, Any]) -> int | None:
    """A "rank" field, when a dump carries one (torch 2.13's do not: its reader takes the rank
    from the file name)."""
    value = raw.get("rank")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rank_from_name(file: str, pattern: re.Pattern[str] | None = None) -> int | None:
    """The rank in a file name: `--rank-from`'s first group, else the trailing number
    (nccl_trace_rank_3, fr_rank_3.json)."""
    name = Path(file).name
    if pattern is not None:
        match = pattern.search(file)
        return int(match.group(1)) if match and match.group(1).isdigit() else None
    match = _RANK_IN_NAME.search(name)
    return int(match.group(1)) if match else None


def read_raw(
    path: str,
    display: str | None = None,
    rank_pattern: re.Pattern[str] | None = None,
    *,
    fast: bool = False,
) -> tuple[dict[str, Any], Dump]:
    """One dump file's raw mapping and its typed header (no records); DumpError (one line,
    with the file) when it cannot be used. With `fast`, a pickle whose entries fastread takes
    comes back with "entries" as fastread.Segments (traces.trace reads them); any other file
    is read as before."""
    display = display or path
    try:
        size = Path(path).stat().st_size
        if size > MAX_DUMP_BYTES:
            raise DumpError(f"dump of {size} bytes is larger than {MAX_DUMP_BYTES}", file=display)
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DumpError(f"unreadable: {exc.strerror or exc}", file=display) from None
    kind = sniff(data[:SNIFF_BYTES]) or "?"
    parsed = fastread.parse(data) if fast and kind == "pickle" else None
    if parsed is not None:
        raw, segments = parsed
        header = Dump.from_dict(
            raw, display, kind, rank_from_name(path, rank_pattern), records=False
        )
        raw["entries"] = segments
        return raw, dataclasses.replace(header, bad_entries=segments.bad)
    raw = load_bytes(data, display)
    # The dump's own "rank" field wins (Dump.from_dict); then --rank-from or the name.
    return raw, Dump.from_dict(
        raw, display, kind, rank_from_name(path, rank_pattern), records=False
    )


def read_dump(
    path: str, display: str | None = None, rank_pattern: re.Pattern[str] | None = None
) -> Dump:
    """One dump file, typed with all its records."""
    raw, header = read_raw(path, display, rank_pattern)
    return Dump.from_dict(raw, header.file, header.kind, header.rank)
