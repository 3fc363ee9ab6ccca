"""dataloader-fd-exhausted: evaluation keeps clones, not the workers' shared-memory batches, and
the file_system sharing strategy is set."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "dataloader-fd-exhausted"


def test_evaluate_keeps_results_that_own_their_memory(tmp_path: Path) -> None:
    driver = """
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
loader = DataLoader(ds, batch_size=8, num_workers=2)
model = torch.nn.Linear(4, 3)
preds, targets = evaluate(model, loader)
assert preds.shape == (64,) and torch.equal(targets, ds.tensors[1])
assert not targets.is_shared()              # not a view of a worker's shared memory
print("owned")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output


def test_the_sharing_strategy_is_file_system(tmp_path: Path) -> None:
    code = example(ENTRY, "fix.fallback.steps[1]")
    code += '\nassert torch.multiprocessing.get_sharing_strategy() == "file_system"\n'
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
