"""inductor-backend-compile-failed: with the C++ toolchain missing, the model is compiled with
aot_eager instead, with a warning, and gives the eager results."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "inductor-backend-compile-failed"


def test_a_missing_toolchain_falls_back_to_aot_eager(tmp_path: Path) -> None:
    driver = """
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
assert isinstance(compile_or_fallback(model), torch._dynamo.eval_frame.OptimizedModule)
inductor_config.cpp.cxx = ("no-such-c++-compiler",)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = compile_or_fallback(model)
assert any("inductor toolchain missing" in str(w.message) for w in caught), caught
x = torch.randn(3, 8)
assert torch.allclose(compiled(x), model(x))          # runs, through aot_eager
print("fell back")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "fell back" in result.stdout
