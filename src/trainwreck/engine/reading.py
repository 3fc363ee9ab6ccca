"""Reading logs: files, stdin and gzip streams in blocks of whole lines, in bounded memory.

A block is a few MiB cut at a line end; a line longer than MAX_LINE bytes is cut there (its tail
is skipped, never buffered); a lone CR ends a line (progress bars); a binary file is told apart
by its head and skipped; a damaged gzip stream is read up to the damage. Every problem becomes a
`Skipped` note, never an exception.
"""

from __future__ import annotations

import gzip
import re
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from trainwreck.findings import Skipped

BLOCK = 2 << 20  # bytes read at a time (a busy block takes about ten times its size while read)
MAX_LINE = 64 << 10  # a line is cut at this length
EVIDENCE_TEXT = 400  # characters of a line kept as evidence


_LONE_CR = re.compile(rb"\r(?!\n)")


def lone_cr_to_lf(data: bytes) -> bytes:
    """A CR not followed by LF ends a line (progress bars redraw with CR alone); replaced byte for
    byte, so offsets into the file stay true."""
    return _LONE_CR.sub(b"\n", data) if b"\r" in data else data


class GzipDamage(Exception):
    """A gzip stream is damaged after the data already handed out; the message says how."""


class GzipStream:
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


def looks_binary(head: bytes) -> bool:
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


class ByteRange:
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


def open_input(source: Any, display: str, skipped: list[Skipped]) -> BinaryIO | None:
    """A binary stream for an input (a path, "-" for stdin, or a stream), gzip decoded; None
    (with a note in `skipped`) when it cannot be opened."""
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
        skipped.append(Skipped(display, f"unreadable: {exc.strerror or exc}", True))
        return None
    if head == b"\x1f\x8b":
        return GzipStream(handle)  # type: ignore[return-value]
    return handle


def read_blocks(
    handle: BinaryIO, display: str, skipped: list[Skipped], head: bool = True
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
            if data and looks_binary(data[:8192]):
                skipped.append(Skipped(display, "binary file (not text); skipped"))
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
    """Whether an input names a file that can be opened again (not stdin, not a stream)."""
    return isinstance(source, (str, Path)) and str(source) != "-"


def head_blocks(source: Any, limit: int) -> Iterator[bytes]:
    """The first `limit` bytes (or a little more, to a line end) of a log file as blocks of
    whole lines, gzip decoded; nothing when it is not a file or cannot be read. For the side
    readers that look at a log after the scan, in the scan's bounded memory."""
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


def read_head(source: Any, limit: int) -> bytes | None:
    """Up to `limit` bytes from the start of a log file, gzip decoded (up to any damage); None
    when it is not a file or cannot be read. For the side readers (suggestions, explain's near
    misses) that look at the head of a log after the scan."""
    if not is_path(source):
        return None
    try:
        with open(source, "rb") as handle:
            if handle.peek(2)[:2] != b"\x1f\x8b":
                return handle.read(limit)
            stream = GzipStream(handle)
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
    except OSError:
        return None


def read_line_at(source: Any, offset: int) -> bytes | None:
    """The line at byte `offset` of a log file (gzip streams seek by decompressing, bounded by
    the offset); None when it cannot be read."""
    try:
        with open(source, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            handle: Any = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw
            handle.seek(offset)
            return handle.readline(MAX_LINE)
    except (OSError, EOFError, zlib.error):
        return None
