"""ddp-unused-parameters: the Trainer argument and accelerate's DDP kwargs handler both ask DDP to
find unused parameters."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, keyword_checks, run

ENTRY = "ddp-unused-parameters"


def test_trainer_and_accelerate_settings(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]")
    driver = keyword_checks(code, "TrainingArguments", "args") + (
        "assert accelerator.ddp_handler.find_unused_parameters is True\n"
    )
    result = run(code + driver, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
