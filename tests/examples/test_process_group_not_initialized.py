"""process-group-not-initialized: the same script trains alone (no process group at all) and under
a launcher (gloo on CPU), and leaves no group behind."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run, run_ranks

ENTRY = "process-group-not-initialized"
PRELUDE = """
import torch
build_model = lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
train_ds = torch.utils.data.TensorDataset(torch.randn(64, 4))
"""
DRIVER = """
main()
assert not dist.is_initialized()
print("done", os.environ.get("RANK", "alone"))
"""


def test_alone_and_under_a_launcher(tmp_path: Path) -> None:
    code = PRELUDE + example(ENTRY, "code_examples[0]") + DRIVER
    alone = run(code, tmp_path)
    assert alone.returncode == 0, alone.output
    assert "done alone" in alone.stdout
    ranks = run_ranks(code, tmp_path)
    assert all(r.returncode == 0 for r in ranks), [r.output for r in ranks]
    assert [r.stdout.split()[-1] for r in ranks] == ["0", "1"]
