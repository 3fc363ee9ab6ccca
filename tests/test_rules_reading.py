"""engine/reading.py's side readers: the head of a log (plain or gzip, up to damage) for
suggestions and explain's near misses, and one line at a byte offset for detector evidence."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from trainwreck.engine.reading import read_head, read_line_at
from trainwreck.explain import _near_misses

LINES = b"".join(b"line %d of a training log\n" % i for i in range(5000))


def test_the_head_of_a_plain_log_is_its_first_bytes(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_bytes(LINES)
    assert read_head(str(log), 100) == LINES[:100]
    assert read_head(log, 10**9) == LINES


def test_the_head_of_a_gzip_log_is_decoded_and_bounded(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log.gz"
    log.write_bytes(gzip.compress(LINES))
    assert read_head(str(log), 1000) == LINES[:1000]
    assert read_head(str(log), 10**9) == LINES


def test_a_truncated_gzip_log_is_read_up_to_the_damage(tmp_path: Path) -> None:
    log = tmp_path / "cut.log.gz"
    packed = gzip.compress(LINES)
    log.write_bytes(packed[: len(packed) // 2])
    head = read_head(str(log), 10**9)
    assert head and LINES.startswith(head) and len(head) < len(LINES)


def test_stdin_streams_and_missing_files_have_no_head(tmp_path: Path) -> None:
    assert read_head("-", 100) is None
    assert read_head(tmp_path / "absent.log", 100) is None
    with open(tmp_path / "x", "wb") as handle:
        assert read_head(handle, 100) is None


def test_a_line_is_read_back_at_its_offset_in_plain_and_gzip_logs(tmp_path: Path) -> None:
    offset = LINES.index(b"line 4321 ")
    plain, packed = tmp_path / "a.log", tmp_path / "a.log.gz"
    plain.write_bytes(LINES)
    packed.write_bytes(gzip.compress(LINES))
    for path in (plain, packed):
        assert read_line_at(str(path), offset) == b"line 4321 of a training log\n"
    assert read_line_at(str(tmp_path / "absent.log"), 0) is None


def test_near_misses_are_found_inside_gzip_logs(tmp_path: Path) -> None:
    log = tmp_path / "worker.log.gz"
    log.write_bytes(
        gzip.compress(
            b"ok\nRuntimeError: DataLoader worker (pid 1) is killed by signal: Terminated.\n"
        )
    )
    found = _near_misses(
        r"DataLoader worker \(pid \d+\) is killed by signal: Killed", [(str(log), str(log))]
    )
    assert [(item.line, item.text[:25]) for item in found] == [(2, "RuntimeError: DataLoader ")]


# --- issue 34: what is text, and how far a file is read --------------------------------------


def _blocks(source: object, display: str = "x.log") -> tuple[bytes, list[str]]:
    from trainwreck.engine.reading import open_input, read_blocks

    skipped: list = []
    handle = open_input(source, display, skipped)
    assert handle is not None, skipped
    try:
        data = b"".join(read_blocks(handle, display, skipped))
    finally:
        handle.close()
    return data, [s.reason for s in skipped]


def test_text_around_a_nul_run_is_read_and_the_run_is_reported(tmp_path: Path) -> None:
    """A crashed node leaves a zero-filled tail (audit 1.10): the text is read, offsets and line
    numbers stay true (the run is blanked in place) and the note says which bytes."""
    text = LINES[:3000]
    log = tmp_path / "crash.log"
    log.write_bytes(text + b"\x00" * 4096 + b"restarted\n" + b"\x00" * 100)
    data, notes = _blocks(str(log))
    assert data.startswith(text) and len(data) == len(text) + 4096 + 10 + 100 + 1
    assert data.count(b"\n") == text.count(b"\n") + 2 and b"\x00" not in data
    assert b"restarted\n" in data
    assert notes == [
        f"4,196 NUL bytes in 2 runs were skipped (the first at byte {len(text):,}): a zero-filled"
        " region, as a crash or power loss leaves"
    ]


def test_a_few_nul_bytes_in_a_line_stay_visible(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"error\x00\x00 here\n" + LINES[:500])
    data, notes = _blocks(str(log))
    assert data.startswith(b"error\x00\x00 here\n") and notes == []


def test_leading_bytes_that_are_not_text_are_skipped_not_the_file(tmp_path: Path) -> None:
    """Audit 1.7: 9000 bytes of invalid UTF-8 before a log made the whole file binary."""
    import random

    rng = random.Random(3)
    garbage = bytes(rng.choice(range(0x80, 0x100)) for _ in range(9000))
    text = LINES[: LINES.index(b"line 700 ")]
    log = tmp_path / "x.log"
    log.write_bytes(garbage + b"\n" + text)
    data, notes = _blocks(str(log))
    assert data == b" " * 9000 + b"\n" + text  # blanked in place: offsets and lines kept
    assert notes == ["the first 9,000 bytes are not text (binary or invalid UTF-8); skipped"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_utf16_and_utf32_logs_with_a_bom_are_decoded(tmp_path: Path, encoding: str) -> None:
    """Audit 1.5: PowerShell's `>` writes UTF-16 LE with a BOM; it was skipped as binary."""
    text = "step 1 | loss 2.31\nstep 2 | loss nan — ünïcode\n" * 2000
    bom = {"utf-16-be": "\ufeff", "utf-32-be": "\ufeff"}.get(encoding, "")
    log = tmp_path / "ps.log"
    log.write_bytes((bom + text).encode(encoding))
    packed = tmp_path / "ps.log.gz"
    packed.write_bytes(gzip.compress(log.read_bytes()))
    for path in (log, packed):
        data, notes = _blocks(str(path))
        assert data == text.encode("utf-8") and notes == [], (path, notes)
        assert read_head(str(path), 30) == text.encode("utf-8")[:30]
        offset = text.encode("utf-8").index(b"step 2")
        assert read_line_at(str(path), offset) == "step 2 | loss nan — ünïcode\n".encode()


@pytest.mark.parametrize("kind", ["zip", "tar", "elf", "random", "nul", "png"])
def test_binaries_are_still_skipped_as_binary(tmp_path: Path, kind: str) -> None:
    import io
    import os
    import sys
    import tarfile
    import zipfile

    path = tmp_path / f"f.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("rank0.log", LINES)
    elif kind == "tar":
        with tarfile.open(path, "w") as archive:
            info = tarfile.TarInfo("rank0.log")
            info.size = len(LINES)
            archive.addfile(info, io.BytesIO(LINES))
    elif kind == "elf":
        path.write_bytes(Path(os.path.realpath(sys.executable)).read_bytes()[: 4 << 20])
    elif kind == "random":
        path.write_bytes(os.urandom(100_000))
    elif kind == "nul":
        path.write_bytes(b"\x00" * 100_000)
    else:
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(30_000))
    data, notes = _blocks(str(path))
    assert data == b"" and notes == ["binary file (not text); skipped"], notes


def test_a_large_gzip_member_has_no_false_trailing_garbage(tmp_path: Path) -> None:
    """Audit 1.12: a member whose data ends in a read capped at the block size left its trailer
    in both zlib's unconsumed_tail and unused_data; it was read twice and seen as garbage."""
    import zlib

    data = b"step 1 | loss 1.0\n" * 120_000  # 2.16 MB: more than one block
    for members in (1, 3):
        compressor = [zlib.compressobj(9, zlib.DEFLATED, 31) for _ in range(members)]
        packed = b"".join(c.compress(data) + c.flush() for c in compressor)
        path = tmp_path / f"b{members}.log.gz"
        path.write_bytes(packed)
        read, notes = _blocks(str(path))
        assert read == data * members and notes == [], notes


def test_a_regular_file_is_read_up_to_its_size_when_opened(tmp_path: Path) -> None:
    """Audit 1.15: a file growing faster than it was read was never finished."""
    from trainwreck.engine.reading import open_input, read_blocks

    text = LINES[: LINES.index(b"line 40 ")]
    log = tmp_path / "growing.log"
    log.write_bytes(text)
    skipped: list = []
    handle = open_input(str(log), "growing.log", skipped)
    with open(log, "ab") as writer:
        writer.write(b"written after the open\n" * 100)
    data = b"".join(read_blocks(handle, "growing.log", skipped))
    handle.close()
    assert data == text
    assert [s.reason for s in skipped] == [
        f"grew while it was read: read up to its size when opened ({len(text):,} bytes); "
        "not followed"
    ]


def test_a_fifo_with_no_writer_is_given_up_on(tmp_path: Path, monkeypatch) -> None:
    """Audit 1.16: a FIFO named on the command line with no writer waited forever."""
    import os
    import time

    from trainwreck.engine import reading

    monkeypatch.setattr(reading, "SPECIAL_WAIT_S", 0.5)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    skipped: list = []
    handle = reading.open_input(str(fifo), "pipe", skipped)
    data = b"" if handle is None else b"".join(reading.read_blocks(handle, "pipe", skipped))
    if handle is not None:
        handle.close()
    assert time.monotonic() - started < 5
    assert data == b""
    assert [(s.reason, s.unread) for s in skipped] == [
        ("a FIFO or device with no data after 0.5 s; not read further (not followed)", True)
    ]


def test_a_fifo_whose_writer_goes_quiet_is_read_up_to_there(tmp_path: Path, monkeypatch) -> None:
    import os
    import threading
    import time

    from trainwreck.engine import reading

    monkeypatch.setattr(reading, "SPECIAL_WAIT_S", 0.5)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    release = threading.Event()

    def writer() -> None:
        with open(fifo, "wb") as handle:
            handle.write(LINES[: LINES.index(b"line 200 ")])
            handle.flush()
            release.wait(10)  # stays open, silent (a `tail -f` that has nothing to say)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        skipped: list = []
        handle = reading.open_input(str(fifo), "pipe", skipped)
        assert handle is not None
        started = time.monotonic()
        data = b"".join(reading.read_blocks(handle, "pipe", skipped))
        handle.close()
        assert time.monotonic() - started < 5
    finally:
        release.set()
        thread.join(10)
    assert data == LINES[: LINES.index(b"line 200 ")]
    assert [(s.reason, s.unread) for s in skipped] == [
        ("a FIFO or device with no data after 0.5 s; not read further (not followed)", False)
    ]
