"""mixed-dtype-mismatch: the head cast to the backbone's dtype runs, and CPU autocast trains float32
weights on a bfloat16 batch; without the cast or autocast the same code raises the real error."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "mixed-dtype-mismatch"
MESSAGE = "mat1 and mat2 must have the same dtype, but got BFloat16 and Float"


def test_the_head_in_the_backbone_dtype_runs(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    result = run(
        code + "\nassert logits.dtype == torch.bfloat16 and logits.shape == (4, 3)\n",
        tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.output
    assert "logits torch.bfloat16 (4, 3)" in result.stdout


def test_the_float32_head_without_the_cast_fails(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        "torch.nn.Linear(32, 3).to(dtype)", "torch.nn.Linear(32, 3)"
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert MESSAGE in result.output


def test_autocast_trains_float32_weights_on_a_bfloat16_batch(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]")
    checks = "\nassert model[0].weight.dtype == torch.float32 and loss.item() < 0.6, loss.item()\n"
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "weights torch.float32" in result.stdout


def test_without_autocast_the_same_step_fails(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]").replace(
        'with torch.autocast(device_type="cpu", dtype=torch.bfloat16):', "if True:"
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert MESSAGE in result.output
