"""Where a log's bytes come from: a gzip stream read up to its damage, a byte range of a file
(a part of a parallel scan), a regular file bounded by its size when opened, and a FIFO or
device that is polled with a time limit. reading.open_input picks one."""

from __future__ import annotations

import io
import os
import select
import stat
import struct
import zlib
from typing import Any, BinaryIO

from trainwreck.findings import Skipped

_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def special_kind(path: str) -> str | None:
    """What a path found inside a folder is when it is not a regular file (opening a FIFO with no
    writer would wait forever); None for regular files and for paths stat cannot read (the
    engine reports those as unreadable)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in _SPECIAL_KINDS:
        if test(mode):
            return kind
    return None


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
        """Check a member's trailer (CRC-32 and length); False on damage. `pending` holds what
        follows the member's deflate data (read() set it from unused_data)."""
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
            # At the end of the deflate data everything after it is in unused_data; when the
            # call was capped by `size`, unconsumed_tail holds some of the same bytes again.
            self.pending = (
                self.decoder.unused_data if self.decoder.eof else self.decoder.unconsumed_tail
            )
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


class SizedFile:
    """A regular file read up to its size when it was opened: a log that grows while it is read
    (a running job) is not followed; the report says so."""

    def __init__(self, handle: Any, display: str, skipped: list[Skipped]) -> None:
        self.handle = handle
        self.size = os.fstat(handle.fileno()).st_size
        self.display = display
        self.skipped = skipped
        self.checked = False

    def peek(self, size: int) -> bytes:
        return bytes(self.handle.peek(size))

    def read(self, size: int) -> bytes:
        left = self.size - self.handle.tell()
        if left > 0:
            return bytes(self.handle.read(min(size, left)))
        if not self.checked:
            self.checked = True
            try:
                grew = os.fstat(self.handle.fileno()).st_size > self.size
            except OSError:
                grew = False
            if grew:
                self.skipped.append(
                    Skipped(
                        self.display,
                        "grew while it was read: read up to its size when opened "
                        f"({self.size:,} bytes); not followed",
                    )
                )
        return b""

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.handle.seek(offset, whence))

    def close(self) -> None:
        self.handle.close()


class PolledRaw(io.RawIOBase):
    """A FIFO or character device, opened without blocking: each read waits at most `wait`
    seconds for data, then ends the input with a note (nothing is followed)."""

    def __init__(self, fd: int, display: str, skipped: list[Skipped], wait: float) -> None:
        self.fd = fd
        self.wait = wait
        self.display = display
        self.skipped = skipped
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)
        self.done = False
        self.got = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.done:
            if not self.poller.poll(self.wait * 1000):
                self.done = True
                self.skipped.append(
                    Skipped(
                        self.display,
                        f"a FIFO or device with no data after {self.wait:g} s; "
                        "not read further (not followed)",
                        unread=self.got == 0,
                    )
                )
                break
            try:
                data = os.read(self.fd, len(buffer))
            except BlockingIOError:
                continue
            if not data:  # every writer closed it
                self.done = True
                break
            buffer[: len(data)] = data
            self.got += len(data)
            return len(data)
        return 0

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


class Prefixed:
    """A stream whose first bytes were read to look at them (a gzip stream's BOM)."""

    def __init__(self, stream: Any, prefix: bytes) -> None:
        self.stream = stream
        self.prefix = prefix
        self.error: Exception | None = None

    def read(self, size: int) -> bytes:
        if self.prefix:
            out, self.prefix = self.prefix, b""
            try:
                out += self.stream.read(max(0, size - len(out)))
            except GzipDamage as exc:  # raised with the next read, after what was decoded
                self.error = exc
            return out
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return bytes(self.stream.read(size))

    def close(self) -> None:
        self.stream.close()
