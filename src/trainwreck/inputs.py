"""The files a diagnosis reads: the paths, folders, globs and streams of its arguments, each
once, in a stable order (diagnose and explain)."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from trainwreck.engine.sources import special_kind
from trainwreck.findings import Skipped


def expand_inputs(
    paths: list[str], skipped: list[Skipped] | None = None, streams: list[Any] | None = None
) -> tuple[list[tuple[str, Any]], list[str]]:
    """(display, source) for every file to read, and the arguments that named nothing.

    Inside folders and globs, special files (FIFOs, sockets, devices) and unreadable folders are
    left out and added to `skipped`; a special file named as an argument (`<(zcat x.gz)`) is read
    as a stream."""
    inputs: list[tuple[str, Any]] = list(streams or [])  # (name, stream) of logs held in memory
    missing: list[str] = []
    seen: set[str] = set()
    skipped = [] if skipped is None else skipped

    def add(display: str, source: Any) -> None:
        key = os.path.realpath(source) if isinstance(source, str) and source != "-" else display
        if key in seen:
            return
        seen.add(key)
        inputs.append((display, source))

    def add_found(full: str) -> None:
        kind = special_kind(full)
        if kind is None:
            add(full, full)
        else:
            skipped.append(Skipped(full, f"not a regular file ({kind}); skipped"))

    def unreadable(error: OSError) -> None:
        where = error.filename if error.filename is not None else "?"
        skipped.append(Skipped(str(where), f"unreadable folder: {error.strerror or error}", True))

    for item in paths:
        if item == "-":
            add("<stdin>", "-")
            continue
        path = Path(item)
        if path.is_dir():
            for folder, dirs, files in os.walk(path, onerror=unreadable):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.startswith("."):
                        continue
                    add_found(os.path.join(folder, name))
        elif path.is_file():
            add(item, item)
        elif any(ch in item for ch in "*?["):
            matches = sorted(glob.glob(item, recursive=True))
            files = [m for m in matches if not os.path.isdir(m)]
            for folder in (m for m in matches if os.path.isdir(m)):
                for sub, dirs, names in os.walk(folder, onerror=unreadable):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    files.extend(
                        os.path.join(sub, n) for n in sorted(names) if not n.startswith(".")
                    )
            if not files:
                missing.append(item)
            for match in files:
                add_found(match)
        elif path.exists():
            add(item, item)  # a FIFO or device: read as a stream
        else:
            missing.append(item)
    return inputs, missing
