"""rendezvous-port-in-use: the port the launcher picks is free, and a store binds it."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "rendezvous-port-in-use"


def test_the_picked_port_can_be_bound(tmp_path: Path) -> None:
    driver = """
import datetime, torch.distributed as dist
store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), 1, is_master=True,
                      timeout=datetime.timedelta(seconds=10))
store.set("k", "v")
assert store.get("k") == b"v"
print("bound", env["MASTER_PORT"])
"""
    result = run(example(ENTRY, "fix.primary.steps[1]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "bound" in result.stdout
