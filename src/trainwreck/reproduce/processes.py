"""Processes a notebook leaves behind: kill a kernel's whole tree, and reap orphans.

psutil (the repro extra) is imported where used; without it the process group still goes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

# Set in each kernel's environment, and so inherited by everything the notebook starts: a
# process that double-forks into its own session leaves the kernel's tree and process group, but
# still carries the token.
TOKEN_VARIABLE = "TRAINWRECK_REPRODUCE_TOKEN"
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def kill_tree(pid: int | None, pgid: int | None = None, token: str | None = None) -> list[int]:
    """SIGKILL a process, all its descendants, its process group, and every process of this user
    whose environment carries `token` (a daemon the notebook started); returns the pids hit.

    Everything is collected before anything is killed (a killed parent's children are
    re-parented and could no longer be found through it)."""
    killed: list[int] = []
    procs: list[Any] = []
    try:
        import psutil
    except ImportError:  # repro extra not installed: the process group still goes
        psutil = None
    if psutil is not None:
        if pid:
            try:
                parent = psutil.Process(pid)
                procs = [*parent.children(recursive=True), parent]
            except psutil.Error:
                procs = []
        if token:
            procs += [p for p in _carrying(psutil, token) if p not in procs]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
                killed.append(proc.pid)
    if pgid:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    if psutil is not None and procs:
        psutil.wait_procs(procs, timeout=5)  # also reaps those re-parented to this process
    return killed


def _carrying(psutil: Any, token: str) -> list[Any]:
    """This user's processes whose environment holds the token (others' cannot be read)."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(TOKEN_VARIABLE) == token:
                found.append(proc)
    return found


def _child_subreaper(on: bool) -> bool | None:
    """Make this process the Linux child sub-reaper (orphans of its descendants are re-parented
    to it, not to init, so a notebook's double-forked daemon stays in our tree even when it
    clears its environment). Returns the previous setting; None where unsupported."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
            return None
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return bool(previous.value)


@contextlib.contextmanager
def reaping() -> Iterator[None]:
    """For the duration of a reproduce run, adopt every orphan of the notebooks, and at the end
    kill and reap every process that appeared under this one (kernels are shut down by then, so
    what is left is something a notebook left running)."""
    try:
        import psutil
    except ImportError:
        yield
        return
    previous = _child_subreaper(True)
    me = psutil.Process()
    before: set[int] = set()
    with contextlib.suppress(psutil.Error):
        before = {child.pid for child in me.children(recursive=True)}
    try:
        yield
    finally:
        strays = []
        with contextlib.suppress(psutil.Error):
            strays = [c for c in me.children(recursive=True) if c.pid not in before]
        for proc in strays:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if strays:
            psutil.wait_procs(strays, timeout=5)
        if previous is not None:
            _child_subreaper(previous)
