"""Every code example marked `runs: gpu` runs to completion on a CUDA host (skipped elsewhere).

A GPU host runs this with the suite (recordings/record-gpu.sh records the GPU notebooks; this file
is the examples' counterpart). It asserts what can be asserted without the reader's own job: the
example exits 0 as one rank of a one-process job. Examples that need more than one host's GPUs or a
download say why they are left out.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from tests.examples.harness import REPO, run_ranks
from trainwreck.knowledge.citations import PYTHON_LANGUAGES, code_blocks
from trainwreck.knowledge.examples import location
from trainwreck.model import load_entries

NOT_HERE = {
    ("flash-attn-unsupported-gpu", "code_examples[0]"): "downloads Qwen/Qwen2.5-0.5B",
    ("python-gc-straggler", "code_examples[2]"): "a Trainer on 8 GPUs",
    ("ddp-param-ready-twice", "code_examples[2]"): "a Trainer on 8 GPUs",
    ("ddp-unused-parameters", "code_examples[2]"): "a Trainer on 8 GPUs",
}


def gpu_examples() -> list[tuple[str, str, str]]:
    found = []
    for entry in load_entries(REPO)[0]:
        for block in code_blocks(entry.data):
            if block.language in PYTHON_LANGUAGES and block.runs == "gpu":
                found.append((entry.id, location(block), block.code))
    return found


def cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def test_gpu_examples_are_listed() -> None:
    examples = gpu_examples()
    assert examples and all(key in {(e, w) for e, w, _ in examples} for key in NOT_HERE)


@pytest.mark.parametrize(
    ("entry_id", "where", "code"), gpu_examples(), ids=lambda v: v if len(v) < 60 else ""
)
def test_gpu_example_runs(entry_id: str, where: str, code: str, tmp_path: Path) -> None:
    if (entry_id, where) in NOT_HERE:
        pytest.skip(NOT_HERE[(entry_id, where)])
    if not cuda_available():
        pytest.skip("no CUDA device here")
    for node in ast.walk(ast.parse(code)):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        for module in modules:
            if importlib.util.find_spec(module.split(".")[0]) is None:
                pytest.skip(f"{module} is not installed")
    [result] = run_ranks(code, tmp_path, world_size=1, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert result.returncode == 0, result.output
