"""collective-desync-deadlock: the fixes keep two gloo ranks in step when one rank lacks a metric
or wants to stop early (the same code picks the GPU under NCCL, which needs a GPU to run)."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, inside, run_ranks

ENTRY = "collective-desync-deadlock"
INIT = """
import datetime, os, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
"""


def test_log_mean_reduces_a_metric_only_one_rank_has(tmp_path: Path) -> None:
    driver = """
metrics = {"loss": torch.tensor(1.0 + 2 * rank)}
if rank == 0:
    metrics["acc"] = torch.tensor(0.5)             # rank 1 has no accuracy this step
log_mean(metrics, ["loss", "acc"], step=3)
dist.destroy_process_group()
"""
    results = run_ranks(INIT + example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert results[0].stdout.strip() == "3 {'acc': 0.25, 'loss': 2.0}"
    assert results[1].stdout.strip() == ""


def test_metrics_reduced_over_a_fixed_list_of_names(tmp_path: Path) -> None:
    code = INIT + inside(
        example(ENTRY, "fix.primary.steps[1]"),
        """
METRIC_NAMES = {"loss", "grad_norm"}
device = torch.device("cpu")
metrics = {"loss": torch.tensor(2.0)} if rank == 0 else {"grad_norm": torch.tensor(4.0)}
FRAGMENT
print(dict(zip(names, vec.tolist())))
dist.destroy_process_group()                       # else gloo's threads can abort the exit
""",
    )
    results = run_ranks(code, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert all(r.stdout.strip() == "{'grad_norm': 4.0, 'loss': 2.0}" for r in results)


def test_an_early_exit_decided_together(tmp_path: Path) -> None:
    code = INIT + inside(
        example(ENTRY, "fix.primary.steps[2]"),
        """
device = torch.device("cpu")
for step in range(100):
    local_should_stop = rank == 1 and step == 3    # only rank 1 wants to stop
    FRAGMENT
    dist.barrier()                                 # the rest of the step's collectives
print("left at step", step)
dist.destroy_process_group()                       # else gloo's threads can abort the exit
""",
    )
    results = run_ranks(code, tmp_path, timeout=120)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert [r.stdout.strip() for r in results] == ["left at step 3"] * 2
