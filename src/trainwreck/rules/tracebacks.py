"""The lines a traceback is made of, and what a `traceback` matcher's frames and exceptions mean.

A traceback is read as one unit from the lines of one file and rank (engine/tracebacks.py). Its
lines, each recognised by one RE2 pattern below (on the line body, after the paste-shape layer
removed rank prefixes, timestamps, indentation and rich box borders):

- a header: Python's `Traceback (most recent call last):` (also `Original Traceback (...)` of a
  DataLoader worker's re-raise, rich's boxed title `Traceback (most recent call last)`, and
  IPython's `TYPE      Traceback (most recent call last)`, which names the exception's type);
  faulthandler's `Current thread 0x... (most recent call first):`, `Thread 0x... (...)` and
  `Stack (most recent call first):` open one unit per thread stack;
- a Python frame: `File "PATH", line N, in FUNCTION` (CPython's traceback module; faulthandler
  prints `File "PATH", line N in FUNCTION`, without the comma);
- a rich frame: `PATH:N in FUNCTION` (rich.traceback, as rich, typer and accelerate print it; a
  frame line wrapped or folded inside the box is joined by the paste-shape layer, and an ASCII
  box's `|` border may follow it);
- an IPython frame: `File PATH:N, in FUNCTION(ARGS)` (IPython 8, Jupyter), and IPython 7's
  `PATH in FUNCTION(ARGS)` (`<ipython-input-N-HASH> in <module>` for a cell);
- a C++ frame: `frame #N: FUNCTION + 0x.. (0x.. in LIB)` (c10's backtrace in PyTorch up to
  2.x), `#N FUNCTION from FILE:N` (c10's CapturedTraceback, PyTorch 2.13), and the throw site
  `Exception raised from FUNCTION at PATH:N (most recent call first):`;
- the exception: `TYPE: MESSAGE` or a bare `TYPE` at the start of a line, TYPE a dotted name
  ending in Error, Exception, Interrupt, Exit, Failure, Warning, Timeout or StopIteration, or a
  class of a module named `errors` (`triton.runtime.errors.OutOfResources`);
  `terminate called after throwing an instance of 'TYPE'` for a C++ exception.

A frame spec in a rule is `PATH:FUNCTION`: PATH is a path suffix matched on whole path
components (`torch/serialization.py` matches `/usr/lib/python3/site-packages/torch/serialization.py`),
FUNCTION the function's name (a Python qualified name or a C++ `ns::Class::fn` matches on its
last components). Either may be left out (`PATH` alone: any function of that file; `:FUNCTION`
alone: that function in any file). The colon that separates them is the first one that is not
part of a C++ `::`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (The patterns below are RE2; each holds a literal the prefilter can find.)
_TYPE_SUFFIX = r"(?:Error|Exception|Interrupt|Exit|Failure|Warning|Timeout|StopIteration)"
# IPython (7 and 8, IPython/core/ultratb.py prepare_header) right-justifies the header after the
# exception's type: `AttributeError                Traceback (most recent call last)`.
HEADER = (
    r"(?:^(?P<tb_htype>(?:[A-Za-z_]\w*\.)*\w*" + _TYPE_SUFFIX + r")\s*)?"
    r"Traceback \(most recent call last\)"
)
# faulthandler (CPython Python/traceback.c): one stack per thread, most recent call first.
FAULT_HEADER = r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+|Stack) \(most recent call first\):"
# (`, in FUNCTION` in CPython's traceback module, ` in FUNCTION` in faulthandler's dump)
PY_FRAME = r'^File "(?P<tb_path>[^"]+)", line (?P<tb_line>\d+)(?:,? in (?P<tb_function>\S+))?'
RICH_FRAME = (
    r'(?:^|\s)(?P<tb_rpath>[^\s"]+\.py):(?P<tb_rline>\d+) in (?P<tb_rfunction>[\w<>.]+)'
    r"\s*\|?\s*$"
)
# IPython 7 (IPython/core/ultratb.py VerboseTB.format_record: '%s %s' % (link, call), call =
# 'in ' + FUNCTION + its argument list, none for <module>): `PATH in FUNCTION(ARGS)`, PATH as
# compress_user wrote it (`~` for the home folder; spaces allowed), or `<ipython-input-N-HASH>`.
# (Two patterns, so that each has a selective literal for the prefilter: ".py" then " in ", or
# "<ipython-input-"; " in " alone is in every other line of prose.)
IPYTHON7_FRAME = (
    r"^(?P<tb_i7path>(?:[/~.]|[A-Za-z]:[\\/]|\\\\)[^\"]*?\.pyx?|[\w.-][\w./\\-]*\.pyx?)"
    r" in (?P<tb_i7function>[\w<>.]+)(?:\(.*)?$"
)
IPYTHON7_CELL_FRAME = r"^(?P<tb_i7path><ipython-input-[^>\s]*>) in (?P<tb_i7function>[\w<>.]+)"
# IPython 8 and Jupyter: `File PATH:N, in FUNCTION(ARGS)` (a qualified name, `Module._call_impl`).
IPYTHON_FRAME = (
    r"^File (?P<tb_ipath>[^\s\",][^,]*?):(?P<tb_iline>\d+), in (?P<tb_ifunction>[\w<>.]+)"
)
CXX_FRAME = r"^frame #(?P<tb_frame>\d+): (?P<tb_frame_text>.+)$"
CXX_CAPTURED_FRAME = r"^#(?P<tb_cframe>\d+) (?P<tb_cframe_text>.+) from (?P<tb_cfile>\S+)$"
CXX_RAISED = (
    r"Exception raised from (?P<tb_raised_function>\S+) at (?P<tb_raised_path>\S+)"
    r" \(most recent call first\)"
)
EXCEPTION = (
    r"^(?P<tb_exception>(?:[A-Za-z_]\w*\.)*\w*" + _TYPE_SUFFIX + r")(?::[ \t]*(?P<tb_message>.*))?$"
)
# Exceptions whose names end otherwise live in modules named for them (triton/runtime/errors.py
# OutOfResources); "errors." is also the literal the prefilter needs (an alternation of module
# names leaves it none, and the pattern then reads every line).
MODULE_EXCEPTION = (
    r"^(?P<tb_mexception>(?:\w+\.)*errors\.[A-Z]\w*)"
    r"(?::[ \t]*(?P<tb_mmessage>.*))?$"
)
TERMINATE = r"terminate called after throwing an instance of '(?P<tb_cxx_exception>[^']+)'"

TYPE_SUFFIX = re.compile(_TYPE_SUFFIX + "$")

# What a caught worker exception says in the message of its re-raise (torch/_utils.py,
# ExceptionWrapper.reraise: f"Caught {exc_type.__name__} {where}.", where = "in DataLoader worker
# process {worker_id}" in torch/utils/data/_utils/worker.py).
CAUGHT = re.compile(r"Caught (?P<type>[\w.]+) in DataLoader worker process (?P<worker>\d+)")

# The captures a traceback match gives the condition (its own, not its lines' patterns').
CAPTURES = frozenset({"exception", "message", "worker", "frames"})

_FRAME_SPEC = re.compile(
    r"^(?P<path>[^\s:]*?)(?:(?<!:):(?!:)(?P<function>[A-Za-z_<~][\w<>~.:]*))?$"
)
_EXCEPTION_NAME = re.compile(r"^[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class FrameSpec:
    """One frame a traceback must hold: a path suffix (None: any file) and a function name
    (None: any function)."""

    path: str | None
    function: str | None

    def __str__(self) -> str:
        return f"{self.path or ''}{':' + self.function if self.function else ''}"

    def matches(self, path: str | None, function: str | None) -> bool:
        if self.path is not None:
            if path is None:
                return False
            path = path.replace("\\", "/")
            if path != self.path and not path.endswith("/" + self.path):
                return False
        if self.function is not None:
            if function is None:
                return False
            if function != self.function and not (
                function.endswith("." + self.function) or function.endswith("::" + self.function)
            ):
                return False
        return True


def parse_frame_spec(text: str) -> FrameSpec | None:
    """The spec of `PATH:FUNCTION` (either part may be left out), or None when malformed."""
    found = _FRAME_SPEC.match(text.strip())
    if found is None:
        return None
    path = found.group("path") or None
    function = found.group("function")
    if path is None and function is None:
        return None
    if path is not None and (path.startswith("/") or path.endswith("/")):
        return None
    return FrameSpec(path, function)


def frame_spec_error(text: str) -> str | None:
    if parse_frame_spec(text) is None:
        return (
            f"frame '{text}' is not PATH:FUNCTION (a path suffix and a function name, "
            "e.g. 'torch/serialization.py:_save'; either may be left out)"
        )
    return None


def exception_name_error(text: str) -> str | None:
    if not _EXCEPTION_NAME.match(text):
        return (
            f"exception '{text}' is not an exception type name "
            "(e.g. RuntimeError, torch.OutOfMemoryError, c10::DistBackendError)"
        )
    return None


def exception_matches(wanted: tuple[str, ...], found: str) -> bool:
    """Whether an exception type printed in a log is one of `wanted`: the same name, or the same
    last components (`OutOfMemoryError` is `torch.OutOfMemoryError`, `torch.cuda.OutOfMemoryError`)."""
    for name in wanted:
        if found == name or found.endswith("." + name) or found.endswith("::" + name):
            return True
    return False


def cxx_function(text: str) -> str:
    """The function of a C++ frame's text: before ' + 0x' and its argument list."""
    cut = text.find(" + 0x")
    if cut >= 0:
        text = text[:cut]
    if not text.startswith("<"):
        paren = text.find("(")
        if paren > 0:
            text = text[:paren]
    return text.strip()


def cxx_library(text: str) -> str | None:
    """The library of an old-style C++ frame: `... (0x7f.. in /path/libc10.so)`."""
    if text.endswith(")"):
        at = text.rfind(" in ")
        if at >= 0 and text.rfind("(0x", 0, at) >= 0:
            return text[at + 4 : -1]
    return None
