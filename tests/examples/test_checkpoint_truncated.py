"""checkpoint-truncated: atomic saves leave a whole file or none, and resuming skips a truncated
checkpoint for the last complete one."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "checkpoint-truncated"


def test_atomic_save_leaves_no_partial_file(tmp_path: Path) -> None:
    driver = """
atomic_torch_save({"w": torch.arange(4)}, "ok.pt")
assert torch.equal(torch.load("ok.pt", weights_only=True)["w"], torch.arange(4))
class Unpicklable:
    def __reduce__(self): raise RuntimeError("disk full")   # fails half way through the write
try:
    atomic_torch_save({"w": torch.arange(4), "bad": Unpicklable()}, "broken.pt")
except RuntimeError:
    pass
assert sorted(os.listdir(".")) == ["example.py", "ok.pt"], os.listdir(".")
print("atomic")
"""
    result = run(example(ENTRY, "fix.primary.steps[1]") + driver, tmp_path)
    assert result.returncode == 0, result.output


def test_save_checkpoint_keeps_verified_files(tmp_path: Path) -> None:
    driver = """
for step in (10, 20, 30):
    final = save_checkpoint({"step": step}, "ckpt", step)
assert sorted(os.listdir("ckpt")) == ["step_0000020.pt", "step_0000030.pt"]
assert zipfile.is_zipfile(final) and torch.load(final, weights_only=True)["step"] == 30
print("kept")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output


def test_resume_skips_the_truncated_checkpoint(tmp_path: Path) -> None:
    setup = """
import os, torch
os.makedirs("ckpt")
for step in (1, 2):
    torch.save({"step": step}, f"ckpt/step_{step}.pt")
data = open("ckpt/step_2.pt", "rb").read()
open("ckpt/step_3.pt", "wb").write(data[: len(data) // 2])     # killed mid-write
"""
    assert run(setup, tmp_path, name="setup.py").returncode == 0
    result = run(
        example(ENTRY, "fix.fallback.steps[1]") + "\nprint('resumed', state['step'])\n", tmp_path
    )
    assert result.returncode == 0, result.output
    assert "skipping incomplete checkpoint ckpt/step_3.pt" in result.stdout
    assert "resumed 2" in result.stdout
