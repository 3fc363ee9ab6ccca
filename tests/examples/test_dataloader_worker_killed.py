"""dataloader-worker-killed: the TrainingArguments the example shows are accepted and hold the values it sets."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, keyword_checks, run

ENTRY = "dataloader-worker-killed"


def test_the_training_arguments(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]")
    result = run(code + keyword_checks(code, "TrainingArguments", "args"), tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "configured" in result.stdout
