"""fsdp2-dtensor-mixed: with the root wrapped, clip_grad_norm_ over every parameter works on 2 gloo ranks and
both ranks see the same total norm; without the root call the same example fails with DTensor's message."""

from __future__ import annotations

import re
from pathlib import Path

from tests.examples.harness import example, run_ranks

ENTRY = "fsdp2-dtensor-mixed"


def test_the_root_wrapped_model_clips_on_two_ranks(tmp_path: Path) -> None:
    results = run_ranks(example(ENTRY, "code_examples[0]"), tmp_path, world_size=2, timeout=300)
    norms = []
    for result in results:
        assert result.returncode == 0, result.output
        norms.append(re.search(r"grad norm ([\d.]+)", result.stdout).group(1))
    assert norms[0] == norms[1]  # full_tensor() gives every rank the same total norm


def test_without_the_root_call_clipping_fails_with_mixed_tensors(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    code = code.replace("fully_shard(model)\n", "").replace(
        "assert all(isinstance(p, DTensor) for p in model.parameters())\n", ""
    )
    results = run_ranks(code, tmp_path, world_size=2, timeout=300)
    for result in results:
        assert result.returncode != 0
        assert "got mixed torch.Tensor and DTensor" in result.stderr, result.output
