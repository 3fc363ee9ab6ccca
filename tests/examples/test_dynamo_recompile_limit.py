"""dynamo-recompile-limit: dynamo's counters show one graph per input shape it recompiled for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "dynamo-recompile-limit"


def test_the_counters_count_the_graphs(tmp_path: Path) -> None:
    prelude = """
import torch
f = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
for n in (2, 3, 4):
    f(torch.ones(n))                      # a new static shape each call: a recompilation
"""
    result = run(prelude + example(ENTRY, "confirm[2]"), tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    stats = ast.literal_eval(re.search(r"\{.*\}", result.stdout).group())
    assert stats["unique_graphs"] == 3, stats
