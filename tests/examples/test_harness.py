"""The examples' tests and the entries agree: every `runs: cpu` example has a test, every example a
test runs exists and is not marked gpu, and every test file belongs to an entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.harness import REPO, example, inside
from trainwreck.knowledge.citations import PYTHON_LANGUAGES, code_blocks
from trainwreck.knowledge.examples import covered_locations, example_tests_path, location
from trainwreck.model import load_entries

HERE = Path(__file__).parent
TESTS = sorted(HERE.glob("test_*.py"))
ENTRY_TESTS = [path for path in TESTS if path.name != "test_harness.py"]


def entry_id(path: Path) -> str:
    return path.stem.removeprefix("test_").replace("_", "-")


def test_every_test_file_belongs_to_an_entry() -> None:
    ids = {entry.id for entry in load_entries(REPO)[0]}
    assert ENTRY_TESTS
    for path in ENTRY_TESTS:
        assert entry_id(path) in ids, f"{path.name}: no entries/{entry_id(path)}.yaml"
        assert example_tests_path(REPO, entry_id(path)) == path


@pytest.mark.parametrize("path", ENTRY_TESTS, ids=lambda p: p.stem)
def test_what_a_test_runs_exists_and_is_not_gpu_only(path: Path) -> None:
    entry = next(e for e in load_entries(REPO)[0] if e.id == entry_id(path))
    blocks = {location(b): b for b in code_blocks(entry.data)}
    covered = covered_locations(path)
    assert covered, f"{path.name} names no example"
    for where in covered:
        assert where in blocks, f"{path.name}: {entry.id} has no code at {where}"
        assert blocks[where].runs in ("cpu", "fragment"), (
            f"{entry.id} {where} is tested on a CPU but marked runs: {blocks[where].runs}"
        )


def test_every_cpu_example_has_a_test() -> None:
    missing = []
    for entry in load_entries(REPO)[0]:
        covered = covered_locations(example_tests_path(REPO, entry.id))
        for block in code_blocks(entry.data):
            if block.runs == "cpu" and location(block) not in covered:
                missing.append(f"{entry.id} {location(block)}")
    assert not missing, missing


def test_runs_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """The numbers the issue asks for (printed with -s): Python examples compiled, executed by a
    test, marked gpu and fragment."""
    counts = {"python": 0, "executed": 0, "cpu": 0, "gpu": 0, "fragment": 0, "unmarked": 0}
    for entry in load_entries(REPO)[0]:
        covered = covered_locations(example_tests_path(REPO, entry.id))
        for block in code_blocks(entry.data):
            if block.language not in PYTHON_LANGUAGES:
                continue
            counts["python"] += 1
            counts["executed"] += location(block) in covered
            counts[block.runs or "unmarked"] += 1
    with capsys.disabled():
        print(f"\nPython code examples: {counts}")
    assert counts["executed"] >= counts["cpu"] > 0


def test_example_and_inside_read_the_entry_verbatim() -> None:
    code = example("torch-load-weights-only", "confirm[0]")
    assert "get_unsafe_globals_in_checkpoint" in code
    with pytest.raises(LookupError):
        example("torch-load-weights-only", "code_examples[99]")
    wrapped = inside("a = 1\nb = 2", "for _ in range(1):\n    FRAGMENT\nprint(a + b)\n")
    assert wrapped == "for _ in range(1):\n    a = 1\n    b = 2\nprint(a + b)\n"
