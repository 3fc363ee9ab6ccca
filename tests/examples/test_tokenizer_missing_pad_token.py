"""tokenizer-missing-pad-token: the tokenizer with pad_token set to its end-of-text token pads the batch;
without that line the same call raises the real ValueError."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "tokenizer-missing-pad-token"


def test_eos_as_pad_pads_the_batch(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    result = run(code, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "[[1, 2, 3, 4], [4, 0, 0, 0]] [[1, 1, 1, 1], [1, 0, 0, 0]]" in result.stdout


def test_without_a_pad_token_the_call_fails(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        "tokenizer.pad_token = tokenizer.eos_token", "pass"
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert "Asking to pad but the tokenizer does not have a padding token" in result.output
