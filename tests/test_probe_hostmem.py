"""trainwreck.probe.hostmem: RSS / PSS / USS of a process and its children from /proc."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from trainwreck.probe.hostmem import child_pids, loader_memory, process_memory

ROLLUP = """00400000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]
Rss:              {rss} kB
Pss:              {pss} kB
Pss_Anon:         {pss} kB
Shared_Clean:        12 kB
Private_Clean:    {pc} kB
Private_Dirty:    {pd} kB
Swap:                 0 kB
"""


def fake_proc(
    root: Path, pid: int, rss: int, pss: int, pc: int, pd: int, children: list[int]
) -> None:
    (root / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (root / str(pid) / "smaps_rollup").write_text(ROLLUP.format(rss=rss, pss=pss, pc=pc, pd=pd))
    (root / str(pid) / "task" / str(pid) / "children").write_text(
        " ".join(map(str, children)) + " "
    )


def test_fields_are_read_in_bytes_and_private_pages_summed(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, rss=4000, pss=1500, pc=100, pd=900, children=[])
    m = process_memory(10, tmp_path)
    assert m is not None
    assert (m.rss_bytes, m.pss_bytes, m.uss_bytes) == (4000 * 1024, 1500 * 1024, 1000 * 1024)


def test_workers_are_summed_and_a_vanished_child_is_skipped(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, rss=4000, pss=1500, pc=0, pd=1000, children=[11, 12, 13])
    fake_proc(tmp_path, 11, rss=3000, pss=600, pc=0, pd=200, children=[])
    fake_proc(tmp_path, 12, rss=3000, pss=700, pc=50, pd=250, children=[])
    # 13 exited between reading the children and reading its smaps: no entry in /proc
    assert child_pids(10, tmp_path) == [11, 12, 13]
    m = loader_memory(10, tmp_path)
    assert m["workers"] == 2
    assert m["workers_uss_bytes"] == (200 + 300) * 1024
    assert m["workers_rss_bytes"] == 6000 * 1024
    assert m["uss_bytes"] == 1000 * 1024


def test_unreadable_proc_gives_nothing_and_never_raises(tmp_path: Path) -> None:
    assert loader_memory(4242, tmp_path) == {}
    assert process_memory(4242, tmp_path) is None
    assert child_pids(4242, tmp_path) == []


@pytest.mark.skipif(
    not Path("/proc/self/smaps_rollup").exists(), reason="Linux /proc with smaps_rollup"
)
def test_a_forked_child_that_writes_inherited_pages_grows_uss_not_rss() -> None:
    block = bytearray(32 * 2**20)  # 32 MiB, resident and shared with the child after fork
    block[::4096] = b"x" * len(block[::4096])
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report, wait, then write every page, report
        os.close(r)
        os.write(w, b"1")
        os.read(go_r, 1)
        block[1::4096] = b"y" * len(block[1::4096])
        os.write(w, b"2")
        os.read(go_r, 1)
        os._exit(0)
    try:
        os.read(r, 1)
        before = loader_memory()
        os.write(go_w, b"g")
        os.read(r, 1)
        after = loader_memory()
    finally:
        os.write(go_w, b"g")
        os.waitpid(pid, 0)
    assert before["workers"] == after["workers"] == 1, sys.platform
    grew = after["workers_uss_bytes"] - before["workers_uss_bytes"]
    assert grew > 28 * 2**20, "the copied pages are private to the child"
    assert abs(after["workers_rss_bytes"] - before["workers_rss_bytes"]) < 4 * 2**20, (
        "RSS barely moves"
    )
