"""Stack dumps of a rank: `py-spy dump --pid` output and Python's faulthandler output.

faulthandler (also `dump_traceback_later` and a SIGUSR1 handler registered with
`faulthandler.register`) writes, per thread:

    Thread 0x00007fc5bb809b80 (most recent call first):
      File "/path/train.py", line 25 in <module>

with "Current thread 0x..." for the thread that dumps. py-spy writes, per thread:

    Thread 4242 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:2050)

Both list the innermost frame first. A stack is normalised for grouping: library frames (in
site-packages, dist-packages or the standard library) keep their function and file name, not
their line, so ranks on different torch builds still group together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MAX_STACK_BYTES = 16 << 20

_FAULTHANDLER_THREAD = re.compile(
    r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$"
)
_FAULTHANDLER_FRAME = re.compile(
    r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>\S.*?)\s*$'
)
_PYSPY_THREAD = re.compile(
    r'^Thread (?P<id>0x[0-9a-fA-F]+|\d+) \((?P<state>[^)]*)\)(?:: "(?P<name>.*)")?\s*$'
)
_PYSPY_FRAME = re.compile(r"^\s+(?P<name>\S.*?) \((?P<file>.*):(?P<line>\d+)\)\s*$")
_PYSPY_PROCESS = re.compile(r"^Process \d+: ")
# py-spy colours its output when CLICOLOR_FORCE is set, as Jupyter kernels set it for their
# children: SGR escapes are dropped before reading (they never span a newline).
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_LIBRARY = ("site-packages/", "dist-packages/", "/lib/python3", "<frozen ")


@dataclass(frozen=True, slots=True)
class StackFrame:
    file: str
    line: int
    name: str

    @property
    def library(self) -> bool:
        # py-spy writes library paths relative to their sys.path entry (torch/distributed/...).
        relative_package = not self.file.startswith("/") and "/" in self.file
        return relative_package or any(part in self.file for part in _LIBRARY)

    def key(self) -> str:
        """The frame as stacks are grouped: no line number for library frames."""
        base = Path(self.file).name
        return f"{self.name} ({base})" if self.library else f"{self.name} ({base}:{self.line})"


@dataclass(frozen=True, slots=True)
class Thread:
    ident: str
    name: str  # py-spy's thread name; "" for faulthandler
    current: bool  # faulthandler's "Current thread": the one that wrote the dump
    at: int  # line of its header in the file
    frames: tuple[StackFrame, ...]  # innermost first


@dataclass(frozen=True, slots=True)
class StackDump:
    file: str
    rank: int | None
    tool: str  # "py-spy" / "faulthandler"
    threads: tuple[Thread, ...]

    def main_thread(self) -> Thread | None:
        """The thread the training loop runs in: py-spy's MainThread, else the thread whose
        outermost frame is a script's <module> and that did not write the dump, else the last."""
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        candidates = [t for t in self.threads if t.frames and t.frames[-1].name == "<module>"]
        others = [t for t in candidates if not t.current] or candidates
        if others:
            return others[-1]
        return self.threads[-1] if self.threads else None


def sniff_stack(head: str) -> str | None:
    """ "py-spy" or "faulthandler" when a text opens as a stack dump."""
    for line in _SGR.sub("", head).splitlines()[:8]:
        if not line.strip():
            continue
        if _FAULTHANDLER_THREAD.match(line) or line.startswith("Fatal Python error"):
            return "faulthandler"
        if _PYSPY_PROCESS.match(line) or _PYSPY_THREAD.match(line):
            return "py-spy"
        return None
    return None


def parse_stacks(text: str, file: str, rank: int | None) -> StackDump | None:
    """The threads of a stack dump; None when the text holds no thread."""
    threads: list[Thread] = []
    tool = ""
    ident, name, current, at, frames = "", "", False, 0, []  # the thread being read

    def close() -> None:
        if ident:
            threads.append(Thread(ident, name, current, at, tuple(frames)))

    for number, line in enumerate(_SGR.sub("", text).splitlines(), start=1):
        if match := _FAULTHANDLER_THREAD.match(line):
            close()
            tool, ident, name, current, frames = (
                "faulthandler",
                match.group(1),
                "",
                line.startswith("Current"),
                [],
            )
            at = number
        elif match := _PYSPY_THREAD.match(line):
            close()
            tool, ident, name, current, frames = (
                "py-spy",
                match.group("id"),
                match.group("name") or "",
                False,
                [],
            )
            at = number
        elif ident and (match := _FAULTHANDLER_FRAME.match(line) or _PYSPY_FRAME.match(line)):
            frames.append(
                StackFrame(match.group("file"), int(match.group("line")), match.group("name"))
            )
    close()
    if not threads:
        return None
    return StackDump(file, rank, tool, tuple(threads))


@dataclass(frozen=True)
class StackGroups:
    """Ranks grouped by their main thread's normalised stack."""

    groups: tuple[
        tuple[tuple[int, ...], tuple[str, ...]], ...
    ]  # (ranks, frames outermost first), largest first
    minority: tuple[int, ...]  # ranks outside the largest group
    differs_at: str  # the minority's first frame that differs from the majority's
    majority_at: str  # the majority's frame at that depth (innermost frame when deeper)


def group_stacks(dumps: list[StackDump]) -> StackGroups | None:
    """Group ranks by stack; None with fewer than two ranks or when all agree."""
    keyed: dict[tuple[str, ...], list[int]] = {}
    for dump in dumps:
        thread = dump.main_thread()
        if dump.rank is None or thread is None:
            continue
        key = tuple(frame.key() for frame in reversed(thread.frames))  # outermost first
        keyed.setdefault(key, []).append(dump.rank)
    if len(keyed) < 2:
        return None
    ordered = sorted(keyed.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    major = ordered[0][0]
    minor_key, _ = ordered[1]
    depth = next(
        (i for i, (a, b) in enumerate(zip(minor_key, major, strict=False)) if a != b),
        min(len(minor_key), len(major)),
    )
    differs = minor_key[depth] if depth < len(minor_key) else (minor_key[-1] if minor_key else "?")
    majority = major[depth] if depth < len(major) else (major[-1] if major else "?")
    # Where each side ends up too: the frame a rank is blocked in is the innermost one.
    if minor_key and minor_key[-1] != differs:
        differs = f"{differs} ... {minor_key[-1]}"
    if major and major[-1] != majority:
        majority = f"{majority} ... {major[-1]}"
    return StackGroups(
        groups=tuple((tuple(sorted(ranks)), key) for key, ranks in ordered),
        minority=tuple(sorted(r for _, ranks in ordered[1:] for r in ranks)),
        differs_at=differs,
        majority_at=majority,
    )
