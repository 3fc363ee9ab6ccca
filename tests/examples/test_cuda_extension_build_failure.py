"""cuda-extension-build-failure: without CUDA the loader falls back to the same op in PyTorch
instead of trying to build."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "cuda-extension-build-failure"


def test_the_reference_op_is_used_without_cuda(tmp_path: Path) -> None:
    driver = """
scale = load_fused_or_reference()          # no binding.cpp / kernel.cu here: it must not build
x = torch.arange(4.0)
assert torch.equal(scale(x, 3.0), x * 3.0)
print("reference")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "reference" in result.stdout
