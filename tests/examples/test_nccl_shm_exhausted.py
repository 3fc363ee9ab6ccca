"""nccl-shm-exhausted: the start-up check stops a multi-rank node whose /dev/shm has less than
4 GiB free, and lets a single rank through."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "nccl-shm-exhausted"


def test_the_shm_check(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]")
    single = run(code, tmp_path, env={"LOCAL_WORLD_SIZE": "1"})
    assert single.returncode == 0, single.output
    eight = run(code, tmp_path, env={"LOCAL_WORLD_SIZE": "8"})
    too_small = shutil.disk_usage("/dev/shm").free < 4 << 30
    assert (eight.returncode != 0) == too_small, eight.output
    if too_small:
        assert "MiB free; NCCL needs more for its intra-node buffers" in eight.stderr
