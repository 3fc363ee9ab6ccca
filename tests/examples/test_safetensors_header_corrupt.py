"""safetensors-header-corrupt: the pre-flight checks tell a git-lfs pointer, an HTML page and a
file cut inside its header from a good file, and the load goes ahead only for a good one."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "safetensors-header-corrupt"
POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 440449768\n"
)


def test_weights_problem_names_each_cause(tmp_path: Path) -> None:
    driver = """
import torch
from safetensors.torch import save_file
save_file({"w": torch.zeros(4)}, "good.safetensors")
data = open("good.safetensors", "rb").read()
open("cut.safetensors", "wb").write(data[:20])                 # cut inside the header
open("pointer.safetensors", "w").write(POINTER)
open("page.safetensors", "w").write("  <!DOCTYPE html><html><body>Not Found</body></html>")
for name in ("good", "pointer", "page", "cut"):
    print(name, weights_problem(f"{name}.safetensors"))
"""
    code = f"POINTER = {POINTER!r}\n" + example(ENTRY, "fix.primary.steps[2]") + driver
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "good None"
    assert lines[1] == "pointer git-lfs pointer, not the object"
    assert lines[2] == "page HTML page, not weights"
    assert lines[3].startswith("cut header length ") and lines[3].endswith("does not fit the file")


def test_from_pretrained_runs_only_on_complete_files(tmp_path: Path) -> None:
    save = """
from transformers import LlamaConfig, LlamaForCausalLM
LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                             num_hidden_layers=1, num_attention_heads=2,
                             num_key_value_heads=2)).save_pretrained("models/my-model")
"""
    assert run(save, tmp_path, name="save.py", timeout=300).returncode == 0
    code = example(ENTRY, "code_examples[0]") + "\nprint('loaded', type(model).__name__)\n"
    good = run(code, tmp_path, timeout=300)
    assert good.returncode == 0, good.output
    assert "loaded LlamaForCausalLM" in good.stdout
    (tmp_path / "models" / "my-model" / "model.safetensors").write_text(POINTER)
    pointer = run(code, tmp_path, timeout=300)
    assert pointer.returncode == 1
    assert "models/my-model/model.safetensors is not a complete safetensors file" in pointer.stderr


def test_a_pointer_in_place_of_a_pickle(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.pth").write_text(POINTER)
    code = example(ENTRY, "code_examples[2]")
    pointer = run(code, tmp_path)
    assert pointer.returncode == 1
    assert "weights/model.pth is a git-lfs pointer: run `git lfs pull`" in pointer.stderr
    save = "import torch\ntorch.save({'w': torch.ones(2)}, 'weights/model.pth')\n"
    assert run(save, tmp_path, name="save.py").returncode == 0
    real = run(code + "\nprint(state['w'].sum().item())\n", tmp_path)
    assert real.returncode == 0, real.output
    assert real.stdout.strip() == "2.0"
