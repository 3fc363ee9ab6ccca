"""fsdp-state-dict-save-hang-oom: every rank takes part in the full state dict, rank 0 alone
writes it, and it holds the model's weights."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run_ranks

ENTRY = "fsdp-state-dict-save-hang-oom"


def test_rank_zero_writes_the_full_state_dict(tmp_path: Path) -> None:
    driver = """
import datetime, os
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
save_full(model, "model.pt")                      # returns on every rank: no hang
saved = torch.load("model.pt", weights_only=True)
assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
print("saved by", os.listdir("."))
dist.destroy_process_group()
"""
    results = run_ranks(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.py", "model.pt"]
