"""engine/reading.py's side readers: the head of a log (plain or gzip, up to damage) for
suggestions and explain's near misses, and one line at a byte offset for detector evidence."""

from __future__ import annotations

import gzip
from pathlib import Path

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
