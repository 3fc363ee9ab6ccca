"""accelerate-fp16-without-gpu: on a machine without CUDA the example picks bf16, which accelerate really applies
(activations in bfloat16), where fp16 would have been skipped without a word (the contrast is run too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.harness import example, run

ENTRY = "accelerate-fp16-without-gpu"

# What the example replaces: the hard-coded fp16 request, which on a CPU device applies nothing.
FP16_CONTRAST = """
from accelerate.state import AcceleratorState
AcceleratorState._reset_state(True)
plain = Accelerator(mixed_precision="fp16")
m = torch.nn.Linear(8, 8).to(plain.device)
with plain.autocast():
    o = m(torch.randn(2, 8, device=plain.device))
print("fp16 request:", plain.device.type, plain.mixed_precision, plain.native_amp, plain.scaler, o.dtype)
"""


def test_the_chosen_precision_is_applied_on_a_cpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the claim is about a machine without CUDA")
    result = run(example(ENTRY, "code_examples[0]") + FP16_CONTRAST, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "cpu bf16 True torch.bfloat16" in result.stdout, result.output
    assert "fp16 request: cpu fp16 False None torch.float32" in result.stdout, result.output
