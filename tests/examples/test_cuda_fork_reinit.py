"""cuda-fork-reinit: a spawn-context pool runs its workers in fresh interpreters (no inherited
CUDA state), under the main guard the example keeps."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "cuda-fork-reinit"


def test_the_spawn_pool_runs_fresh_interpreters(tmp_path: Path) -> None:
    prelude = """
import os
def score_on_gpu(shard):   # on a CPU: report which interpreter ran it, not a GPU score
    return shard * 2, __name__, os.getppid()
shards = [1, 2, 3, 4]
"""
    driver = """
    assert [r[0] for r in results] == [2, 4, 6, 8]
    # a spawned worker imported this script afresh as __mp_main__ (a forked one would still be
    # __main__, with the parent's state, CUDA's included)
    assert {r[1] for r in results} == {"__mp_main__"}, results
    assert {r[2] for r in results} == {os.getpid()}
    print("spawned")
"""
    result = run(prelude + example(ENTRY, "code_examples[1]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "spawned" in result.stdout
