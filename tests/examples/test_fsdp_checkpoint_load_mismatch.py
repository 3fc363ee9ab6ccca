"""fsdp-checkpoint-load-mismatch: a DCP checkpoint saved by two ranks resumes in one process (DCP
reshards), with the model rebuilt from the saved config."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run, run_ranks

ENTRY = "fsdp-checkpoint-load-mismatch"
BUILD = """
import torch
def build_and_wrap(cfg):
    torch.manual_seed(cfg["seed"])
    return torch.nn.Sequential(torch.nn.Linear(cfg["dim"], cfg["dim"]), torch.nn.Linear(cfg["dim"], 2))
"""


def test_saved_on_two_ranks_resumed_on_one(tmp_path: Path) -> None:
    save = """
import datetime
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
cfg = {"dim": 8, "seed": 0}
model = build_and_wrap(cfg)
with torch.no_grad():
    model[0].weight.fill_(0.5)                    # trained weights, not the initial ones
save(model, cfg, "ckpt/step_10")
dist.barrier(); dist.destroy_process_group()
"""
    results = run_ranks(BUILD + example(ENTRY, "code_examples[0]") + save, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    resume = """
model, cfg = resume(build_and_wrap, "ckpt/step_10")
assert cfg == {"dim": 8, "seed": 0} and torch.all(model[0].weight == 0.5)
print("resumed")
"""
    result = run(BUILD + example(ENTRY, "code_examples[0]") + resume, tmp_path)
    assert result.returncode == 0, result.output
    assert "resumed" in result.stdout
