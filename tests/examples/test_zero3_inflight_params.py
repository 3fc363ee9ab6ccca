"""zero3-inflight-params: the fixed-order forward runs the vision tower for every batch (the module
order ZeRO-3 traces stays the same) and text-only batches get the text-only result."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, inside, run

ENTRY = "zero3-inflight-params"


def test_the_same_modules_run_for_text_only_and_image_batches(tmp_path: Path) -> None:
    code = inside(
        example(ENTRY, "code_examples[1]"),
        """
import torch
class Multimodal(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.lm = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10)
        self.vision, self.proj = torch.nn.Linear(12, 8), torch.nn.Linear(8, 8)

    FRAGMENT

model, order = Multimodal(), []
for name, module in model.named_children():
    module.register_forward_hook(lambda m, i, o, name=name: order.append(name))
ids, images = torch.randint(0, 10, (2, 5)), torch.randn(2, 5, 12)
model(ids, images, torch.ones(2)); with_images = list(order); order.clear()
text_only = model(ids, torch.zeros(2, 5, 12), torch.zeros(2)); without = list(order)
assert with_images == without == ["embed", "vision", "proj", "lm"], (with_images, without)
assert torch.allclose(text_only, model.lm(model.embed(ids)))
print("same order")
""",
    )
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
