"""What is text, one rule for every reader: text_start tells a log from a binary file by its
first block, judged without its NUL runs (the zero-filled region a crashed node leaves, blanked in
place by NulRuns and reported); a leading stretch that is not text is skipped; a UTF-16 or UTF-32
log with a byte-order mark is decoded (DecodedStream)."""

from __future__ import annotations

import codecs
import re
from typing import Any

# NUL bytes in a row that are a zero-filled region (a crash, power loss, a preallocated file), not
# part of a line; fewer stay in the line and are shown as \x00.
MIN_NUL_RUN = 16
TEXT_WINDOW = 8192  # bytes judged at a time by text_start

_NUL_RUN = re.compile(rb"\x00{%d,}" % MIN_NUL_RUN)
# C0 controls a log does not hold (tab, line ends, form feed and ESC for colours are text).
_CONTROLS = bytes(b for b in range(32) if b < 9 or (13 < b < 32 and b != 0x1B))
# Formats whose payload may be plain text (a stored zip member, a tar of logs): binary by their
# magic bytes, whatever follows.
_MAGIC = ((0, b"PK\x03\x04"), (257, b"ustar"), (0, b"\x7fELF"))
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def _marked(error: UnicodeDecodeError) -> tuple[str, int]:
    _BAD.extend(range(error.start, error.end))
    return "\ufffd", error.end


_BAD: list[int] = []  # positions _marked records (used in one call at a time, below)
codecs.register_error("trainwreck-mark", _marked)


def _bad_bytes(data: bytes) -> list[int]:
    """Positions of the bytes that are not text: invalid UTF-8 and control characters."""
    _BAD.clear()
    data.decode("utf-8", "trainwreck-mark")
    bad = [*_BAD, *(at for at, byte in enumerate(data) if byte in _CONTROLS or byte == 0)]
    _BAD.clear()
    return sorted(bad)


def _looks_text(window: bytes) -> bool:
    """Text, judged without its NUL runs: under 0.5% other NULs and under 10% control
    characters or invalid UTF-8. All NUL (a hole) is not text."""
    rest = _NUL_RUN.sub(b"", window)
    if not rest:
        return False
    if rest.count(b"\x00") > len(rest) // 200:
        return False
    if len(rest) - len(rest.translate(None, _CONTROLS)) > len(rest) // 10:
        return False
    return rest.decode("utf-8", "replace").count("\ufffd") <= len(rest) // 10


def text_start(head: bytes) -> int | None:
    """Where the text of a file starts in its first block: 0 for a log (NUL runs in it are not
    judged); past a leading stretch that is not text (a header, invalid UTF-8) when a full
    window of text follows; None for a binary file (no text window, or an archive's magic)."""
    if not head or (_looks_text(head[:TEXT_WINDOW]) and not _archive(head)):
        return 0
    if _archive(head):
        return None
    step = 512
    for start in range(step, len(head) - TEXT_WINDOW + 1, step):
        if _looks_text(head[start : start + TEXT_WINDOW]):
            return _garbage_end(head, start)
    return None


def _archive(head: bytes) -> bool:
    return any(head[at : at + len(magic)] == magic for at, magic in _MAGIC)


def _garbage_end(head: bytes, start: int) -> int:
    """The end of the leading garbage, which ends near `start` (the first text window): just
    past the last bad byte of the last 64-byte cell that is more than a quarter bad."""
    origin = max(0, start - 512)
    bad = _bad_bytes(head[origin : start + TEXT_WINDOW])
    cells: dict[int, list[int]] = {}
    for at in bad:
        cells.setdefault(at // 64, []).append(at)
    dense = [cell for cell, found in cells.items() if len(found) > 16]
    return origin + (max(cells[max(dense)]) + 1 if dense else 0)


def blank(data: bytes) -> bytes:
    """`data` with every byte but LF as a space: skipped in place, offsets and lines kept."""
    return re.sub(rb"[^\n]", b" ", data)


def blank_nul_runs(data: bytes) -> bytes:
    """NUL runs of MIN_NUL_RUN or more as spaces (one buffer; read_blocks carries runs across
    its reads)."""
    return _NUL_RUN.sub(lambda m: b" " * len(m.group()), data) if b"\x00" in data else data


class NulRuns:
    """Blanks NUL runs in a stream read piece by piece, and counts them for the report."""

    def __init__(self) -> None:
        self.total = 0
        self.runs = 0
        self.first: int | None = None
        self.current = 0  # length of the run the stream is in, when it is one
        self.held = b""  # trailing NULs too few to be a run yet
        self.offset = 0  # stream offset of the next byte handed in

    def blank(self, data: bytes, final: bool) -> bytes:
        base = self.offset - len(self.held)
        self.offset += len(data)
        data, self.held = self.held + data, b""
        if b"\x00" not in data:
            self.current = 0
            return data
        if not final and data.endswith(b"\x00"):
            tail = len(data) - len(data.rstrip(b"\x00"))
            if tail < MIN_NUL_RUN and not (self.current and tail == len(data)):
                data, self.held = data[:-tail], data[-tail:]
        out = bytearray(data)
        at = 0
        if self.current:  # the run the last piece ended in goes on
            at = len(data) - len(data.lstrip(b"\x00"))
            out[:at] = b" " * at
            self.total += at
            self.current = self.current + at if at == len(data) else 0
        for match in _NUL_RUN.finditer(data, at):
            length = match.end() - match.start()
            out[match.start() : match.end()] = b" " * length
            self.runs += 1
            self.total += length
            if self.first is None:
                self.first = base + match.start()
            self.current = length if match.end() == len(data) else 0
        return bytes(out)

    def note(self) -> str | None:
        if not self.runs:
            return None
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        return (
            f"{self.total:,} NUL bytes in {runs} were skipped (the first at byte {self.first:,}):"
            " a zero-filled region, as a crash or power loss leaves"
        )


def bom_encoding(head: bytes) -> str | None:
    """The codec of a UTF-16 or UTF-32 text by its byte-order mark, or None."""
    return next((encoding for bom, encoding in _BOMS if head.startswith(bom)), None)


class DecodedStream:
    """A UTF-16 or UTF-32 log (told by its byte-order mark) read as UTF-8: offsets and line
    numbers are those of the UTF-8 text."""

    def __init__(self, raw: Any, encoding: str, prefix: bytes = b"") -> None:
        self.raw = raw
        self.decoder = codecs.getincrementaldecoder(encoding)("replace")
        self.prefix = prefix
        self.buffer = b""
        self.done = False

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size and not self.done:
            chunk, self.prefix = self.prefix or self.raw.read(max(size, 1 << 16)), b""
            self.buffer += self.decoder.decode(chunk, final=not chunk).encode("utf-8")
            self.done = not chunk
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def close(self) -> None:
        self.raw.close()
