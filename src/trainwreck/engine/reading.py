"""Reading logs: files, stdin and gzip streams in blocks of whole lines, in bounded memory.

A block is a few MiB cut at a line end; a line longer than MAX_LINE bytes is cut there (its tail
is skipped, never buffered); a lone CR ends a line (progress bars); a damaged gzip stream is read
up to the damage. What is text follows one rule (text_start): runs of NUL bytes (the zero-filled
tail a crashed node leaves) are not judged but blanked in place, a leading stretch that is not
text is skipped, a UTF-16 or UTF-32 log with a byte-order mark is decoded, and only a file with
no text in its first block is binary. A regular file is read up to its size when it was opened;
a FIFO or device gives up after SPECIAL_WAIT_S seconds without data. Every problem becomes a
`Skipped` note, never an exception.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from trainwreck.engine.sources import (
    ByteRange,
    GzipDamage,
    GzipStream,
    PolledRaw,
    Prefixed,
    SizedFile,
)
from trainwreck.engine.text import (
    DecodedStream,
    NulRuns,
    blank,
    blank_nul_runs,
    bom_encoding,
    text_start,
)
from trainwreck.findings import Skipped
from trainwreck.sanitize import REPORT_ESCAPES

# Names other modules import from here (the reading API).
__all__ = [
    "BLOCK",
    "MAX_LINE",
    "ByteRange",
    "GzipDamage",
    "bom_encoding",
    "evidence_text",
    "head_blocks",
    "is_path",
    "lone_cr_to_lf",
    "open_input",
    "read_blocks",
    "read_head",
    "read_line_at",
]

BLOCK = 2 << 20  # bytes read at a time (a busy block takes about ten times its size while read)
MAX_LINE = 64 << 10  # a line is cut at this length
EVIDENCE_TEXT = 400  # characters of a line kept as evidence
MAX_NUL_RUN = 16 << 20  # after this many NULs in a row (a sparse file's hole) the rest is not read
SPECIAL_WAIT_S = 30.0  # a FIFO or device named on the command line: seconds without data


_LONE_CR = re.compile(rb"\r(?!\n)")


def lone_cr_to_lf(data: bytes) -> bytes:
    """A CR not followed by LF ends a line (progress bars redraw with CR alone); replaced byte for
    byte, so offsets into the file stay true."""
    return _LONE_CR.sub(b"\n", data) if b"\r" in data else data


# Evidence is printed to terminals: control characters from a log (NUL, ANSI escapes) are shown
# as visible escapes instead of being replayed.
def evidence_text(raw: bytes) -> str:
    """A log line as evidence: decoded leniently, bounded, control and bidirectional characters
    made visible as reports show them (sanitize.REPORT_ESCAPES)."""
    text = raw[: EVIDENCE_TEXT * 4].decode("utf-8", "replace").rstrip("\r\n")
    return text.translate(REPORT_ESCAPES)[:EVIDENCE_TEXT]


def _decoded(handle: Any, head: bytes) -> Any:
    """`handle` (whose first bytes are `head`) as the bytes of its text: gzip decompressed,
    UTF-16 and UTF-32 decoded, else as it is."""
    if head[:2] == b"\x1f\x8b":
        stream = GzipStream(handle)
        try:
            first = stream.read(4)
        except GzipDamage as exc:  # damaged from the start: read_blocks reports it
            damaged = Prefixed(stream, b"")
            damaged.error = exc
            return damaged
        encoding = bom_encoding(first)
        return DecodedStream(stream, encoding, first) if encoding else Prefixed(stream, first)
    encoding = bom_encoding(head)
    return DecodedStream(handle, encoding) if encoding else handle


def open_input(source: Any, display: str, skipped: list[Skipped]) -> BinaryIO | None:
    """A binary stream of an input's text (a path, "-" for stdin, or a stream): gzip, UTF-16 and
    UTF-32 decoded; a regular file bounded by its size at open, a FIFO or device by
    SPECIAL_WAIT_S without data. None (with a note in `skipped`) when it cannot be opened."""
    if not isinstance(source, (str, Path)):
        return source
    if str(source) == "-":
        return sys.stdin.buffer
    handle: Any = None
    try:
        mode = os.stat(source).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            # Opening a FIFO to read waits for a writer: never block, poll with a limit instead.
            fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
            handle = io.BufferedReader(PolledRaw(fd, display, skipped, SPECIAL_WAIT_S), BLOCK)
        else:
            handle = open(source, "rb")  # noqa: SIM115 - closed by the caller
            if stat.S_ISREG(mode):
                handle = SizedFile(handle, display, skipped)
        # peek, not read and seek: a FIFO or `<(cmd)` cannot seek
        head = bytes(handle.peek(4)[:4])
    except OSError as exc:
        if handle is not None:
            handle.close()
        skipped.append(Skipped(display, f"unreadable: {exc.strerror or exc}", True))
        return None
    return _decoded(handle, head)  # type: ignore[no-any-return]


def read_blocks(
    handle: BinaryIO, display: str, skipped: list[Skipped], head: bool = True
) -> Iterator[bytes]:
    """Blocks of whole lines; lines longer than MAX_LINE are cut there. `head`: the reading
    starts at the start of the file (where text_start tells text from binary). NUL runs are
    blanked in place, and the report says how many bytes they held."""
    nul = NulRuns()
    try:
        yield from _lines(handle, display, skipped, head, nul)
    finally:
        if (note := nul.note()) is not None:
            skipped.append(Skipped(display, note))


def _lines(
    handle: BinaryIO, display: str, skipped: list[Skipped], first: bool, nul: NulRuns
) -> Iterator[bytes]:
    pending = b""
    skipping = False  # inside the uncopied tail of an overlong line
    held_cr = b""  # a CR ending the last read: a line end unless a LF follows
    stopped = False  # a NUL run of MAX_NUL_RUN: what was read is used, the rest is not read
    while True:
        try:
            data = b"" if stopped else handle.read(BLOCK)
        except (EOFError, zlib.error, gzip.BadGzipFile, GzipDamage) as exc:
            reason = (
                str(exc)
                if isinstance(exc, GzipDamage)
                else "truncated gzip stream"
                if isinstance(exc, EOFError)
                else f"corrupt gzip data ({exc})"
            )
            skipped.append(
                Skipped(display, f"{reason}: read up to the damage, the rest was skipped")
            )
            data = b""
        except OSError as exc:
            skipped.append(
                Skipped(display, f"read error: {exc.strerror or exc}; the rest was skipped")
            )
            data = b""
        if first:
            first = False
            start = text_start(data)
            if start is None:
                skipped.append(Skipped(display, "binary file (not text); skipped"))
                return
            if start:
                data = blank(data[:start]) + data[start:]
                skipped.append(
                    Skipped(
                        display,
                        f"the first {start:,} bytes are not text (binary or invalid UTF-8); "
                        "skipped",
                    )
                )
        data = nul.blank(data, final=not data)
        if nul.current >= MAX_NUL_RUN and not stopped:
            stopped = True
            skipped.append(
                Skipped(
                    display,
                    f"{MAX_NUL_RUN >> 20} MiB of NUL bytes in a row (a hole or a zero-filled "
                    "file): the rest was not read",
                )
            )
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
        last = data.rfind(b"\n")
        if last >= 0 and len(data) - last - 1 <= MAX_LINE:
            # The common case, in one copy: the held part of the last line and this read up to
            # its last newline (pending holds no newline: the block's last one is in `data`).
            if pending:
                yield b"".join((pending, memoryview(data)[: last + 1]))
            else:
                yield data[: last + 1]
            pending = data[last + 1 :]
            continue
        buffer = pending + data if pending else data
        end = buffer.rfind(b"\n")
        if end < 0:
            if len(buffer) > MAX_LINE:
                skipped.append(
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
            skipped.append(
                Skipped(display, f"a line longer than {MAX_LINE // 1024} KiB was cut there")
            )
            yield buffer[: end + 1] + pending[:MAX_LINE] + b"\n"
            pending = b""
            skipping = True
            continue
        yield buffer[: end + 1]


def is_path(source: Any) -> bool:
    """Whether an input names a regular file that can be opened again (not stdin, a stream, a
    FIFO or a device: what they held was consumed by the scan)."""
    if not isinstance(source, (str, Path)) or str(source) == "-":
        return False
    try:
        return stat.S_ISREG(os.stat(source).st_mode)
    except OSError:
        return False


def head_blocks(source: Any, limit: int) -> Iterator[bytes]:
    """The first `limit` bytes (or a little more, to a line end) of a log file as blocks of
    whole lines, read as the scan reads them; nothing when it is not a file or cannot be read.
    For the side readers that look at a log after the scan, in the scan's bounded memory."""
    if not is_path(source):
        return
    skipped: list[Skipped] = []
    handle = open_input(source, str(source), skipped)
    if handle is None:
        return
    try:
        size = 0
        for block in read_blocks(handle, str(source), skipped):
            yield block
            size += len(block)
            if size >= limit:
                return
    finally:
        handle.close()


def _text_stream(raw: Any) -> Any:
    """A file opened "rb" as the bytes of its text (gzip, UTF-16 and UTF-32 decoded)."""
    return _decoded(raw, bytes(raw.peek(4)[:4]))


def _read_up_to(stream: Any, limit: int) -> bytes:
    """Up to `limit` bytes of a stream, stopping quietly at gzip damage."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        try:
            part = stream.read(min(BLOCK, limit - size))
        except GzipDamage:
            break
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def read_head(source: Any, limit: int) -> bytes | None:
    """Up to `limit` bytes from the start of a log file's text (gzip, UTF-16 and UTF-32 decoded,
    NUL runs blanked as the scan reads them; up to any damage); None when it is not a file or
    cannot be read. For the side readers (suggestions, explain's near misses, the prefilter's
    sample) that look at the head of a log after the scan."""
    if not is_path(source):
        return None
    try:
        with open(source, "rb") as raw:
            return blank_nul_runs(_read_up_to(_text_stream(raw), limit))
    except OSError:
        return None


def read_line_at(source: Any, offset: int) -> bytes | None:
    """The line at byte `offset` of a log file's text, as the scan read it (a decoded stream is
    read up to the offset, bounded by it); None when it cannot be read."""
    try:
        with open(source, "rb") as raw:
            stream = _text_stream(raw)
            if stream is raw:
                raw.seek(offset)
                return blank_nul_runs(raw.readline(MAX_LINE))
            while offset > 0:
                skipped = len(stream.read(min(BLOCK, offset)))
                if not skipped:
                    return None
                offset -= skipped
            line = b""
            while b"\n" not in line and len(line) < MAX_LINE:
                part = stream.read(4096)
                if not part:
                    break
                line += part
            cut = line.find(b"\n")
            return blank_nul_runs(line[: cut + 1] if cut >= 0 else line[:MAX_LINE])
    except (OSError, EOFError, zlib.error, GzipDamage):
        return None
