"""python-gc-straggler: the GC timer logs full collections, the census counts tracked objects, and
the threshold and disable steps do what they say."""

from __future__ import annotations

import re
from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "python-gc-straggler"


def test_the_gc_timer_logs_a_full_collection(tmp_path: Path) -> None:
    driver = """
logging.basicConfig(level=logging.INFO, format="%(message)s")
garbage = [[i] for i in range(10000)]
for item in garbage:
    item.append(item)                        # cycles only the collector frees
del garbage
gc.collect()                                 # a full (generation 2) collection
"""
    result = run(example(ENTRY, "confirm[1]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    line = re.search(r"gc generation=2 duration_ms=([\d.]+) collected=(\d+)", result.stderr)
    assert line and int(line.group(2)) >= 9000, result.output


def test_the_census_counts_tracked_objects(tmp_path: Path) -> None:
    result = run(example(ENTRY, "confirm[2]"), tmp_path)
    assert result.returncode == 0, result.output
    count, census = result.stdout.splitlines()
    assert re.fullmatch(r"\d+ tracked objects", count) and census.startswith("[('")


def test_threshold_and_disable(tmp_path: Path) -> None:
    code = (
        example(ENTRY, "fix.fallback.steps[3]")
        + "\nassert gc.get_threshold() == (50000, 50, 100)\n"
    )
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
    assert re.fullmatch(r"\(\d+, 10, 10\)", result.stdout.strip()), result.stdout
    code = example(ENTRY, "fix.emergency.steps[0]") + "\nassert not gc.isenabled()\n"
    assert run(code, tmp_path).returncode == 0
