"""torch-load-weights-only: the allowlists load the old checkpoints the entry names, with
weights_only=True, and the plain-values checkpoint needs none."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "torch-load-weights-only"

# The "old" checkpoint of the entry's mechanism: numpy metrics, numpy RNG state (a uint32 array),
# an argparse Namespace, next to the model and optimizer state.
WRITE_OLD_CHECKPOINT = """
import argparse, numpy as np, torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.AdamW(model.parameters())
model(torch.randn(3, 4)).sum().backward(); opt.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
            "args": argparse.Namespace(lr=0.1, name="run1"), "best": np.float64(0.25),
            "losses": np.arange(5, dtype=np.float64), "rng": np.random.get_state(),
            "step": 7}, "ckpt.pt")
"""


def test_the_unsafe_globals_are_listed_without_loading(tmp_path: Path) -> None:
    run(WRITE_OLD_CHECKPOINT, tmp_path, name="write.py")
    result = run(example(ENTRY, "confirm[0]"), tmp_path)
    assert result.returncode == 0, result.output
    for name in ("numpy._core.multiarray._reconstruct", "numpy.ndarray", "argparse.Namespace"):
        assert name in result.stdout, result.output


def test_the_primary_allowlist_loads_an_old_checkpoint(tmp_path: Path) -> None:
    run(WRITE_OLD_CHECKPOINT, tmp_path, name="write.py")
    checks = """
assert ckpt["step"] == 7 and ckpt["args"].name == "run1" and float(ckpt["best"]) == 0.25
assert ckpt["rng"][0] == "MT19937" and ckpt["rng"][1].dtype == np.uint32
print("loaded")
"""
    result = run(example(ENTRY, "fix.primary.steps[0]") + checks, tmp_path)
    assert result.returncode == 0, result.output
    assert "loaded" in result.stdout


def test_the_default_refuses_the_old_checkpoint(tmp_path: Path) -> None:
    """The failure the allowlist is for (torch >= 2.6): without it, the same file is refused."""
    run(WRITE_OLD_CHECKPOINT, tmp_path, name="write.py")
    result = run("import torch\ntorch.load('ckpt.pt')\n", tmp_path)
    assert result.returncode != 0
    assert "Weights only load failed" in result.stderr


def test_plain_values_need_no_allowlist(tmp_path: Path) -> None:
    prelude = """
import argparse, numpy as np, torch
model = torch.nn.Linear(4, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
args = argparse.Namespace(lr=0.1); best_metric = np.float64(0.5); step = 3; path = "plain.pt"
"""
    checks = """
ckpt = torch.load(path, weights_only=True)
assert ckpt["args"] == {"lr": 0.1} and ckpt["best_metric"] == 0.5 and type(ckpt["best_metric"]) is float
print("loaded")
"""
    result = run(prelude + example(ENTRY, "fix.fallback.steps[0]") + checks, tmp_path)
    assert result.returncode == 0, result.output


def test_the_code_example_saves_plain_and_loads_old_files(tmp_path: Path) -> None:
    run(WRITE_OLD_CHECKPOINT, tmp_path, name="write.py")
    driver = """
old = load("ckpt.pt")
assert old["step"] == 7 and old["rng"][1].dtype == np.uint32
model = torch.nn.Linear(4, 2); opt = torch.optim.AdamW(model.parameters())
save("new.pt", model, opt, argparse.Namespace(lr=0.1), step=8, best=np.float64(0.5))
new = torch.load("new.pt", weights_only=True)          # no allowlist needed
assert new["args"] == {"lr": 0.1} and new["best"] == 0.5 and new["step"] == 8
print("ok")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "ok" in result.stdout
