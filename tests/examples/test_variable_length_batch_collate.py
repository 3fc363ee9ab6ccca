"""variable-length-batch-collate: the token-classification collator pads labels with -100 to the input length,
where DataCollatorWithPadding leaves them ragged; pad_sequence batches feature sequences of any length."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "variable-length-batch-collate"


def test_the_collator_pads_labels_with_minus_100(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    checks = """
assert batch["labels"].shape == batch["input_ids"].shape == (2, 6)
assert batch["labels"][0].tolist() == [-100, 1, 0, -100, -100, -100]
assert batch["attention_mask"][0].tolist() == [1, 1, 1, 1, 0, 0]
"""
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "'labels': (2, 6)" in result.stdout


def test_the_input_only_collator_fails_on_the_same_samples(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        "DataCollatorForTokenClassification(tok)", "DataCollatorWithPadding(tok)"
    )
    code = code.replace(
        "import BertTokenizerFast, DataCollatorForTokenClassification",
        "import BertTokenizerFast, DataCollatorWithPadding",
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert (
        "Unable to create tensor, you should probably activate truncation and/or padding"
        in result.output
    )
    assert "(`labels` in this case)" in result.output


def test_pad_sequence_batches_any_lengths(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]")
    checks = "\nassert feats.shape == (4, 7, 4) and feats[3, 2:].abs().sum() == 0\n"
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "(4, 7, 4) [3, 7, 5, 2]" in result.stdout


def test_default_collate_fails_on_the_same_data(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]").replace(", collate_fn=collate", "")
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert (
        "stack expects each tensor to be equal size, but got [3, 4] at entry 0 and [7, 4] at entry 1"
        in result.output
    )
