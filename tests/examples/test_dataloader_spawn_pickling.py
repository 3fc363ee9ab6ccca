"""dataloader-spawn-pickling: the dataset that drops its lock when pickled trains under spawn workers, and
the same dataset without its pickling hooks fails with pickle's real message."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "dataloader-spawn-pickling"


def test_the_dataset_with_a_lock_loads_under_spawn(tmp_path: Path) -> None:
    result = run(example(ENTRY, "code_examples[0]"), tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    # 2 * (0 + 1 + ... + 31): every item was read once, through the workers
    assert "spawn workers read all items: sum 992" in result.stdout


def test_without_the_pickling_hooks_spawn_cannot_start_the_workers(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    hooks = code[code.index("    def __getstate__") : code.index("def stack")]
    result = run(code.replace(hooks, "\n\n"), tmp_path, timeout=300)
    assert result.returncode != 0
    assert "TypeError: cannot pickle '_thread.lock' object" in result.stderr
    assert "Got pickle error when attempting to start a worker Process" in result.stderr
