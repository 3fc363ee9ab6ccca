"""flash-attn-not-installed: choosing the backend with is_flash_attn_2_available() runs where flash_attn
is absent; requesting flash_attention_2 unconditionally raises transformers' real availability error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.harness import example, run

ENTRY = "flash-attn-not-installed"
PREFACE = "FlashAttention2 has been toggled on, but it cannot be used due to the following error:"


def _flash_attn_absent() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is None


pytestmark = pytest.mark.skipif(not _flash_attn_absent(), reason="flash_attn is installed here")


def test_the_availability_check_reports_flash_attn_missing(tmp_path: Path) -> None:
    code = example(ENTRY, "confirm[0]")
    result = run(code, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "flash_attn importable: False" in result.stdout
    assert "is_flash_attn_2_available(): False" in result.stdout


def test_the_chosen_backend_is_sdpa_and_trains(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    checks = "\nassert attn == 'sdpa' and torch.isfinite(loss)\nassert model.model.embed_tokens.weight.grad is not None\n"
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "attention sdpa loss" in result.stdout


def test_requesting_flash_attention_2_unconditionally_fails(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        'attn = "flash_attention_2" if is_flash_attn_2_available() else "sdpa"',
        'attn = "flash_attention_2"',
    )
    assert 'attn = "flash_attention_2"\n' in code
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert "ImportError: " + PREFACE in result.output
    assert "doesn't seem to be installed" in result.output
