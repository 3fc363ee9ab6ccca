"""peft-target-modules-not-found: the layer listing shows GPT-2's names, LoRA on c_attn builds and
back-propagates, and the Llama names on the same model raise PEFT's real error."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "peft-target-modules-not-found"


def test_the_listing_shows_c_attn_and_no_q_proj(tmp_path: Path) -> None:
    code = example(ENTRY, "confirm[0]")
    result = run(
        code + "\nassert 'c_attn' in names and 'q_proj' not in names\n", tmp_path, timeout=300
    )
    assert result.returncode == 0, result.output
    assert (
        "adaptable layer names: ['c_attn', 'c_fc', 'c_proj', 'lm_head', 'wpe', 'wte']"
        in result.stdout
    )


def test_lora_on_c_attn_builds_and_backpropagates(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    checks = (
        "\nassert trainable == 2 * 4 * (32 + 96), trainable\n"
        "grads = [p.grad for n, p in model.named_parameters() if 'lora_A' in n]\n"
        "assert grads and all(g is not None for g in grads)\n"
    )
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "trainable 1024 loss" in result.stdout


def test_llama_names_on_gpt2_raise_the_real_error(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        'target_modules=["c_attn"]', 'target_modules=["q_proj", "v_proj"]'
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert (
        "not found in the base model. Please check the target modules and try again."
        in result.output
    )
    assert "Target modules {'" in result.output
