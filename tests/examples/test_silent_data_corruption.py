"""silent-data-corruption: the replica checksum finds no difference between identical replicas
and names the rank whose parameters differ."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run_ranks

ENTRY = "silent-data-corruption"


def test_the_checksum_names_the_corrupted_rank(tmp_path: Path) -> None:
    driver = """
import datetime
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
assert replica_checksum_check(model, step=1) == []
if dist.get_rank() == 1:
    with torch.no_grad():
        model.weight[3, 3] += 1e-3                 # one flipped value on rank 1
print("bad", replica_checksum_check(model, step=2))
dist.destroy_process_group()
"""
    results = run_ranks(example(ENTRY, "confirm[0]") + driver, tmp_path, world_size=3)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert all("bad [1]" in r.stdout for r in results)
    assert (
        "param checksum mismatch across data-parallel replicas at step 2: rank 1 differs"
        in results[0].stdout
    )
