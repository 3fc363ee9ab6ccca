"""rendezvous-connect-timeout: the smoke test joins both ranks and all-reduces."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run_ranks

ENTRY = "rendezvous-connect-timeout"


def test_the_smoke_test_on_two_ranks(tmp_path: Path) -> None:
    results = run_ranks(example(ENTRY, "code_examples[0]"), tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert sorted(r.stdout.strip() for r in results) == ["rank 0/2 ok: 2", "rank 1/2 ok: 2"]
