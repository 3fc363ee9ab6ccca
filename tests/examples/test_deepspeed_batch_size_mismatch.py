"""deepspeed-batch-size-mismatch: the computed batch config satisfies DeepSpeed's own batch assertion on every
world size and keeps the global batch, and rejects a global batch the GPUs cannot split."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "deepspeed-batch-size-mismatch"

DEEPSPEED_CHECKS = """
import deepspeed.runtime.config as dsc


class Probe(dsc.DeepSpeedConfig):
    # DeepSpeed's own arithmetic: _set_batch_related_parameters then _batch_assertion, without a process group
    def __init__(self, cfg, world_size):
        self.train_batch_size = cfg["train_batch_size"]
        self.train_micro_batch_size_per_gpu = cfg["train_micro_batch_size_per_gpu"]
        self.gradient_accumulation_steps = cfg["gradient_accumulation_steps"]
        self.world_size = world_size


for world_size in (1, 2, 4, 8):
    cfg = batch_config(64, 4, world_size)
    Probe(cfg, world_size)._configure_train_batch_size()
    assert cfg["train_batch_size"] == 64
try:
    Probe({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, 2)._configure_train_batch_size()
except AssertionError as e:
    print("deepspeed:", e)
try:
    batch_config(64, 4, 3)
except ValueError as e:
    print("rejected:", e)
"""


def test_the_computed_config_passes_deepspeeds_batch_check(tmp_path: Path) -> None:
    result = run(example(ENTRY, "code_examples[0]") + DEEPSPEED_CHECKS, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert (
        "8 {'train_batch_size': 64, 'train_micro_batch_size_per_gpu': 4, 'gradient_accumulation_steps': 2}"
        in result.stdout
    )
    assert (
        "2 {'train_batch_size': 64, 'train_micro_batch_size_per_gpu': 4, 'gradient_accumulation_steps': 8}"
        in result.stdout
    )
    assert "world_size 64 != 4 * 2 * 2" in result.stdout
    assert "rejected: global batch 64 is not a multiple of 4 x 3" in result.stdout
