"""triton-shared-memory-oor: the shared-memory estimate of the pipelined tiles."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "triton-shared-memory-oor"


def test_the_estimate(tmp_path: Path) -> None:
    result = run(example(ENTRY, "confirm[1]"), tmp_path)
    assert result.returncode == 0, result.output
    # 4 stages x (256x64 + 64x256) elements x 2 bytes
    assert result.stdout.strip() == "262144 bytes for the pipelined A and B tiles"
