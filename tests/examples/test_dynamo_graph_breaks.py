"""dynamo-graph-breaks: the tensor form of the data-dependent branch leaves no graph break, and
fullgraph=True refuses the .item() form the example replaces."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "dynamo-graph-breaks"


def test_the_branch_stays_in_the_graph(tmp_path: Path) -> None:
    driver = """
import torch._dynamo
class Breaks(Block):                      # the form the example's comment says breaks
    def forward(self, x):
        h = torch.relu(self.a(x))
        scale = h.abs().mean().item()
        if scale > 0.1:
            h = h * 0.5
        return self.b(h)
x = torch.randn(4, 64)
assert torch._dynamo.explain(Block())(x).graph_break_count == 0
assert torch._dynamo.explain(Breaks())(x).graph_break_count >= 1
torch._dynamo.reset()
torch.compile(Block(), fullgraph=True, backend="eager")(x)           # compiles whole
try:
    torch.compile(Breaks(), fullgraph=True, backend="eager")(x)
except Exception as e:  # Unsupported, or UserError for the data-dependent branch (2.13)
    assert isinstance(e, torch._dynamo.exc.TorchDynamoException), repr(e)
    print("fullgraph refuses the break")
assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "fullgraph refuses the break" in result.stdout
