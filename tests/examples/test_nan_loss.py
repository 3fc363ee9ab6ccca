"""nan-loss: the guarded loop stops at the first non-finite loss and names its step."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "nan-loss"


def test_the_loop_stops_at_the_first_nan(tmp_path: Path) -> None:
    prelude = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(5)]
batches[3][0][0, 0] = float("nan")                 # one bad input at step 3
loader = batches
"""
    result = run(prelude + example(ENTRY, "code_examples[0]"), tmp_path)
    assert result.returncode != 0
    assert "FloatingPointError: non-finite loss nan at step 3" in result.stderr, result.output
