"""safetensors-shared-tensor-save: save_model writes the tied matrix once and load_model ties it
again; safe_open lists the keys and metadata without loading the tensors."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "safetensors-shared-tensor-save"


def test_the_tied_model_round_trips(tmp_path: Path) -> None:
    checks = """
from safetensors import safe_open
with safe_open("tiny.safetensors", "pt") as f:
    keys = list(f.keys())
assert len(keys) == 1, keys                 # one copy of the tied matrix
assert torch.equal(fresh.embed.weight, model.embed.weight)
print("tied")
"""
    result = run(example(ENTRY, "code_examples[0]") + checks, tmp_path)
    assert result.returncode == 0, result.output
    assert "tied" in result.stdout


def test_safe_open_lists_keys_and_metadata(tmp_path: Path) -> None:
    setup = """
import torch
from safetensors.torch import save_file
save_file({f"layer{i}.weight": torch.zeros(2) for i in range(7)}, "model.safetensors",
          metadata={"format": "pt"})
"""
    assert run(setup, tmp_path, name="setup.py").returncode == 0
    result = run(example(ENTRY, "confirm[1]"), tmp_path)
    assert result.returncode == 0, result.output
    assert result.stdout.strip() == (
        "['layer0.weight', 'layer1.weight', 'layer2.weight', 'layer3.weight', 'layer4.weight'] "
        "{'format': 'pt'}"
    )
