"""lr-scheduler-before-optimizer-step: in the right order the updates use the schedule's values from the first
one and nothing warns; swapping the two calls warns once and shifts every value by one."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "lr-scheduler-before-optimizer-step"
WARNING = "Detected call of `lr_scheduler.step()` before `optimizer.step()`"


def test_the_right_order_applies_the_schedule(tmp_path: Path) -> None:
    result = run(example(ENTRY, "code_examples[0]"), tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "applied [0.01, 0.02, 0.03, 0.04, 0.05]" in result.stdout
    assert WARNING not in result.output


def test_the_swapped_order_warns_and_shifts(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        "    opt.step()\n    sched.step()", "    sched.step()\n    opt.step()"
    )
    code = code.replace('    applied.append(round(opt.param_groups[0]["lr"], 4))\n', "")
    code = code.replace(
        "    opt.step()\n",
        '    applied.append(round(opt.param_groups[0]["lr"], 4))\n    opt.step()\n',
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "applied [0.02, 0.03, 0.04, 0.05, 0.06]" in result.stdout
    assert result.output.count(WARNING) == 1
