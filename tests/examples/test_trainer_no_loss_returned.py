"""trainer-no-loss-returned: DataCollatorForLanguageModeling(mlm=False) adds labels equal to the inputs with
padding at -100, where DataCollatorWithPadding adds none."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "trainer-no-loss-returned"


def test_the_collator_creates_labels(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    checks = """
assert batch["labels"][0].tolist() == batch["input_ids"][0].tolist()
assert batch["labels"][1].tolist()[2:] == [-100] * 4
"""
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "['attention_mask', 'input_ids', 'labels']" in result.stdout


def test_the_padding_collator_creates_none(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    code = code.replace(
        "DataCollatorForLanguageModeling(tok, mlm=False)", "DataCollatorWithPadding(tok)"
    )
    code = code.replace(
        "import DataCollatorForLanguageModeling,", "import DataCollatorWithPadding,"
    )
    code = code.replace('print(sorted(batch), batch["labels"].tolist())', "print(sorted(batch))")
    result = run(code, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "['attention_mask', 'input_ids']" in result.stdout
