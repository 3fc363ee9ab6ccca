"""checkpoint-disk-full: the space check refuses a save that would not fit, and the saver keeps the
last checkpoints only, never leaving a partial file."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "checkpoint-disk-full"


def test_ensure_space_refuses_what_does_not_fit(tmp_path: Path) -> None:
    driver = """
ensure_space(".", need_bytes=1024)                    # fits
try:
    ensure_space(".", need_bytes=shutil.disk_usage(".").free)   # x1.2 margin: cannot fit
except RuntimeError as e:
    print("refused:", e)
"""
    result = run(example(ENTRY, "fix.primary.steps[2]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "refused: not enough space in ." in result.stdout


def test_save_with_retention_keeps_the_last_two(tmp_path: Path) -> None:
    driver = """
for step in range(1, 6):
    path = save_with_retention({"step": step, "w": torch.ones(8) * step}, "ckpt", step, keep=2)
names = sorted(os.listdir("ckpt"))
assert names == ["step_0000004.pt", "step_0000005.pt"], names
assert torch.load(path, weights_only=True)["step"] == 5
try:
    save_with_retention({"step": 6}, "ckpt", 6, est_bytes=shutil.disk_usage("ckpt").free)
except RuntimeError as e:
    print("refused:", e)
assert sorted(os.listdir("ckpt")) == names          # nothing written, nothing deleted
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "refused: ckpt:" in result.stdout and "for step 6" in result.stdout
