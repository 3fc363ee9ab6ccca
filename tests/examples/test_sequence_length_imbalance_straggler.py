"""sequence-length-imbalance-straggler: the length-grouped sampler gives both ranks of a step
batches of similar lengths from one global batch; the Trainer options exist and the flattening
collator packs without padding."""

from __future__ import annotations

import json
from pathlib import Path

from tests.examples.harness import example, run, run_ranks

ENTRY = "sequence-length-imbalance-straggler"


def test_ranks_of_a_step_get_similar_lengths(tmp_path: Path) -> None:
    driver = """
import datetime, json
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
lengths = np.random.default_rng(7).integers(16, 2048, size=4096)
steps = [list(map(int, b)) for b in length_grouped_batches(lengths, global_batch=16, seed=0, epoch=0)]
print(json.dumps({"steps": steps, "lengths": lengths.tolist()}))
dist.destroy_process_group()
"""
    results = run_ranks(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    rank0, rank1 = (json.loads(r.stdout) for r in results)
    lengths = rank0["lengths"]
    assert len(rank0["steps"]) == len(rank1["steps"]) == 4096 // 16
    spreads, seen = [], set()
    for a, b in zip(rank0["steps"], rank1["steps"], strict=True):
        assert len(a) == len(b) == 8 and not set(a) & set(b)
        seen |= set(a) | set(b)
        spreads.append(abs(max(lengths[i] for i in a) - max(lengths[i] for i in b)))
    assert len(seen) == 4096  # every sample once per epoch
    # the longest sequences (what each rank pads to) differ by little within a step
    assert sum(spreads) / len(spreads) < 50, sum(spreads) / len(spreads)


def test_the_trainer_options_and_the_flattening_collator(tmp_path: Path) -> None:
    driver = """
assert args.train_sampling_strategy == "batch_rebalance"
batch = collator([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9]]          # no padding
assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]        # each document restarts
print("packed")
"""
    result = run(example(ENTRY, "code_examples[1]") + driver, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "packed" in result.stdout


def test_the_fallback_sampling_strategy(tmp_path: Path) -> None:
    code = example(ENTRY, "fix.fallback.steps[0]")
    code += '\nassert args.train_sampling_strategy == "batch_rebalance"\nprint("rebalanced")\n'
    result = run(code, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
