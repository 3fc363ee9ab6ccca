"""The fast paths of the diagnose engine find exactly what the per-line path finds.

The engine takes shortcuts on busy blocks (one RE2 set match over the rest of a block, then the
bulk path that records a block's matches at once, reading every line when most are candidates).
Each test scans the same input with the shortcuts forced on (after the first candidate line, in
small blocks) and off, and compares the whole scan state: counts, ranks, evidence, first lines,
captured columns, events and every series point.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from trainwreck import engine as eng
from trainwreck.compile.packs import compile_folder
from trainwreck.engine import parallel, reading, scanning

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    bundle, _ = compile_folder(ROOT)
    return bundle.rules


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): _plain(v) for k, v in value.items()}
    return value


def state_of(result: eng.ScanResult) -> dict[str, Any]:
    """Everything a scan leaves for evaluation, as comparable plain data (dict order kept)."""
    runs = []
    for run in result.runs:
        matchers = {}
        for name, state in run.matchers.items():
            matchers[name] = {
                "count": state.count,
                "rank_counts": list(state.rank_counts.items()),
                "evidence": [
                    (e.file, e.line, e.text, e.rank, e.t, e.part, e.offset) for e in state.evidence
                ],
                "first": list(state.first.items()),
                "columns": state.columns,
                "events": None
                if state.events is None
                else [
                    (e.rank, e.index, e.t, e.file, e.line, e.value, e.offset) for e in state.events
                ],
                "truncated": state.truncated,
                "cut": state.cut,
            }
        series = {
            name: [
                (rank, buffer.count, buffer.offered, buffer.thinned, buffer.rows.tolist())
                for rank, buffer in per_rank.items()
            ]
            for name, per_rank in run.series.items()
        }
        runs.append({"id": run.rule.id, "matchers": matchers, "series": series})
    return _plain(
        {
            "runs": runs,
            "ranks_seen": sorted(map(repr, result.ranks_seen)),
            "lines": result.lines,
            "bytes": result.bytes,
            "skipped": [(s.file, s.reason) for s in result.skipped],
        }
    )


def scan(rules: list[dict[str, Any]], paths: list[Path], *, fast: bool) -> dict[str, Any]:
    """(`fast` only names the run in a failure's diff; shortcuts() sets it.)"""
    engine = eng.Engine(rules)
    return state_of(engine.scan([(str(p), str(p)) for p in paths], jobs=1))


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "BLOCK", 64 << 10)


def shortcuts(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    """Shortcuts from the first candidate line of every block (and kept however many new
    shapes the block has), or never."""
    for name in ("BLOCK_SET_AFTER", "BLOCK_SET_EARLY"):
        monkeypatch.setattr(scanning, name, 1 if on else 1 << 60)
    monkeypatch.setattr(scanning, "STEP_ASIDE_AFTER", 1 << 60)


def both(
    rules: list[dict[str, Any]], paths: list[Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], dict[str, Any]]:
    shortcuts(monkeypatch, False)
    slow = scan(rules, paths, fast=False)
    shortcuts(monkeypatch, True)
    fast = scan(rules, paths, fast=True)
    return slow, fast


def count_bulk(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"bulk": 0}
    original = eng.Engine._scan_shapes

    def counted(self: eng.Engine, *args: Any, **kwargs: Any) -> Any:
        calls["bulk"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(eng.Engine, "_scan_shapes", counted)
    return calls


def regression_logs() -> list[Path]:
    return sorted(p for p in (ROOT / "tests" / "logs").rglob("*") if p.is_file())


def test_regression_logs_scan_alike(rules, monkeypatch, small_blocks) -> None:
    logs = regression_logs()
    assert logs
    calls = count_bulk(monkeypatch)
    engine = eng.Engine(rules)  # one engine (compiling the patterns once); a scan keeps no state
    for log in logs:
        states = []
        for on in (False, True):
            shortcuts(monkeypatch, on)
            states.append(state_of(engine.scan([(str(log), str(log))], jobs=1)))
        assert states[1] == states[0], log
    assert calls["bulk"] > 10  # the bulk path ran on many of them


def mixed_log(path: Path, lines: int, seed: int, overlong: bool = True) -> Path:
    """Step lines of 8 ranks in the shapes rules read (prefixed, inline rank, no rank, with and
    without timestamps, units, commas, NaN), with JSON probe records, megatron lines, kill
    signals and an overlong line among them."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        rank = i % 8
        ms = f"{rng.uniform(400, 900):.1f}"
        shape = rng.random()
        stamp = (
            f"[2024-05-01 12:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d}] "
            if shape < 0.7
            else ""
        )
        if shape < 0.5:
            out.append(f"[default{rank}]:{stamp}INFO step {i} | loss 2.5 | step time {ms} ms")
        elif shape < 0.6:
            out.append(f"{stamp}rank={rank} iter: {i} step_time={ms}s tokens 4096")
        elif shape < 0.65:
            out.append(f"step {i} step time {ms.replace('.', ',')} ms")
        elif shape < 0.7:
            out.append(f"[rank{rank}]:step {i} | step time nan ms")
        elif shape < 0.75:
            out.append(
                f'{{"event": "step", "rank": {rank}, "step": {i}, "duration_ms": {ms}, "t": {1700000000 + i}}}'
            )
        elif shape < 0.8:
            out.append(
                f"[default{rank}]: iteration {i}/ 1000 | elapsed time per iteration (ms): {ms} |"
            )
        elif shape < 0.81:
            # a pattern that reads digits ('Signal 9'): decided line by line, not by the shape
            out.append(f"[default{rank}]:Signal {rng.choice('179')} (SIGKILL) received by PID {i}")
        elif shape < 0.82 and overlong:
            out.append(f"[default{rank}]:step {i} " + "x" * (70 << 10) + " step time 1 ms")
        else:
            out.append(f"[default{rank}]:{stamp}step {i} batch_time: {ms} sec loss_scale: 65536.0")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("seed", [1, 2])
def test_mixed_step_logs_scan_alike(rules, monkeypatch, small_blocks, tmp_path, seed) -> None:
    calls = count_bulk(monkeypatch)
    log = mixed_log(tmp_path / f"rank_{seed}.log", 3000, seed)
    slow, fast = both(rules, [log, log], monkeypatch)
    assert fast == slow
    assert calls["bulk"] > 0  # the shortcut really ran


def test_crlf_block_uses_the_per_line_set(rules, monkeypatch, small_blocks, tmp_path) -> None:
    log = tmp_path / "crlf.log"
    log.write_bytes(
        b"".join(
            b"[rank%d]:step %d | step time %d ms\r\n" % (i % 4, i, 500 + i % 7) for i in range(5000)
        )
    )
    slow, fast = both(rules, [log], monkeypatch)
    assert fast == slow


def gc_step_log(path: Path, steps: int) -> Path:
    """Step times of 4 ranks in one torchrun log, every 37th step stalled by 400 ms on all."""
    rng = random.Random(5)
    lines = []
    for step in range(1, steps):
        for rank in range(4):
            ms = 500 * (1 + rng.gauss(0, 0.01)) + (400 if step % 37 == 0 else 0)
            lines.append(f"[default{rank}]:step {step} | loss 2.5 | step time {ms:.1f} ms")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_findings_alike_on_a_step_heavy_log(rules, monkeypatch, tmp_path) -> None:
    """The diagnose report itself (with the GC straggler's stalls planted) is the same."""
    from trainwreck.compile.packs import RuleSet
    from trainwreck.diagnose import diagnose

    bundle, _ = compile_folder(ROOT)
    log = gc_step_log(tmp_path / "combined.log", 1500)
    rule_set = RuleSet(rules=bundle.rules, entries=bundle.entries)
    reports = []
    for on in (False, True):
        shortcuts(monkeypatch, on)
        report = json.dumps(diagnose([str(log)], ROOT, rule_set=rule_set).to_json(), sort_keys=True)
        reports.append(re.sub(r'"seconds": [0-9.e-]+', "", report))  # the time it took
    assert reports[0] == reports[1]
    assert "python-gc-straggler" in reports[1]


SUMMARY = """|===========================================================================|
|                  PyTorch CUDA memory summary, device ID {gpu}                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: {ooms}            |        cudaMalloc retries: {retries}         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Non-releasable memory |  {nonrel} MiB |  12000 MiB |  90000 MiB |  87000 MiB |
| GPU reserved memory   |  70000 MiB |  70000 MiB |  70000 MiB |      0 B   |
|===========================================================================|
"""


@pytest.mark.parametrize("with_blocks", [False, True])
def test_one_file_in_parts_scans_alike(rules, monkeypatch, small_blocks, tmp_path, with_blocks):
    """One large file split across processes gives the serial scan state: line numbers,
    offsets, first lines, positional series indexes and sampled ranks carry across the cuts,
    and no cut falls inside an open start ... end block."""
    log = mixed_log(tmp_path / "combined.log", 4000, 3, overlong=False)  # (those are not cut)
    if with_blocks:
        text = log.read_text().splitlines(keepends=True)
        for at in range(200, len(text), 450):
            text[at] = text[at] + SUMMARY.format(gpu=at % 8, ooms=1, retries=at, nonrel=at)
        log.write_text("".join(text))
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", log.stat().st_size // 4)
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 3)  # three parts on any machine
    cut: list[Any] = []
    original = parallel.plan_parts

    def planned(*args: Any) -> Any:
        found = original(*args)
        cut.append(found)
        return found

    monkeypatch.setattr(parallel, "plan_parts", planned)
    serial = state_of(eng.Engine(rules).scan([(str(log), str(log))], jobs=1))
    parts = state_of(eng.Engine(rules).scan([(str(log), str(log))], jobs=3))
    assert cut and cut[0] is not None and len(cut[0][1]) == 3, cut
    assert parts == serial


def test_a_full_shape_book_scans_alike(rules, monkeypatch, small_blocks, tmp_path) -> None:
    """Past MAX_SHAPES new shapes are worked out line by line and not remembered: the same
    results, and the book stays bounded."""
    from trainwreck.engine import shapes

    monkeypatch.setattr(shapes, "MAX_SHAPES", 3)
    log = mixed_log(tmp_path / "rank_5.log", 3000, 5)
    slow, fast = both(rules, [log], monkeypatch)
    assert fast == slow
    engine = eng.Engine(rules)
    engine.scan([(str(log), str(log))], jobs=1)
    assert len(engine.shapes.known) == 3 and len(engine.shapes.by_key) == 5


def random_words_log(path: Path, lines: int, seed: int) -> Path:
    """Lines of random words, many of them words the rules look for, so that most lines are
    candidates and hardly two have the same shape; step lines of a few shapes among them."""
    rng = random.Random(seed)
    common = [
        "step",
        "time",
        "loss",
        "error",
        "warning",
        "NCCL",
        "WARN",
        "nan",
        "ms",
        "rank",
        "CUDA",
        "memory",
        "GiB",
        "sec",
    ]

    def word() -> str:
        if rng.random() < 0.35:
            return rng.choice(common)
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))

    out = []
    for i in range(lines):
        if rng.random() < 0.2:
            out.append(
                f"[default{i % 4}]:step {i} | loss 2.5 | step time {rng.uniform(400, 900):.1f} ms"
            )
        else:
            out.append(" ".join(word() for _ in range(rng.randint(4, 9)))[:78].rstrip())
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("dense", [False, True])
def test_shapes_step_aside_when_they_do_not_repeat(
    rules, monkeypatch, small_blocks, tmp_path, dense
):
    """When the shapes of a block do not repeat, the rest of it (and the next blocks) is read
    line by line: the same state, and the shape book does not fill with one-off shapes."""
    log = random_words_log(tmp_path / "words.log", 6000, 11)
    shortcuts(monkeypatch, False)
    slow = scan(rules, [log], fast=False)
    for name in ("BLOCK_SET_AFTER", "BLOCK_SET_EARLY"):
        monkeypatch.setattr(scanning, name, 1 if dense else 40)
    monkeypatch.setattr(scanning, "STEP_ASIDE_AFTER", 64)
    stepped = {"aside": 0}
    original = eng.Engine._scan_shapes

    def counted(self: eng.Engine, *args: Any, **kwargs: Any) -> Any:
        found = original(self, *args, **kwargs)
        stepped["aside"] += not found  # False: the rest went line by line
        return found

    monkeypatch.setattr(eng.Engine, "_scan_shapes", counted)
    engine = eng.Engine(rules)
    fast = state_of(engine.scan([(str(log), str(log))], jobs=1))
    assert fast == slow
    assert stepped["aside"] > 0
    assert len(engine.shapes.known) < 1000  # (6,000 lines, nearly as many shapes)


@pytest.mark.parametrize("shortcuts_on", [False, True])
def test_alike_series_are_filled_once_with_what_each_rule_would_get(
    rules, monkeypatch, small_blocks, tmp_path, shortcuts_on
) -> None:
    """Rules that define a series alike (the same patterns, units, value and index: the losses
    of the loss rules, the step times of the straggler rules) share one buffer, and every
    rule's series holds what it holds when each rule fills its own."""
    from trainwreck.engine import patterns

    logs = [mixed_log(tmp_path / "rank_6.log", 3000, 6), gc_step_log(tmp_path / "gc.log", 400)]
    logs += [
        p for p in regression_logs() if "loss" in p.parent.name or "straggler" in p.parent.name
    ]
    shortcuts(monkeypatch, shortcuts_on)
    engine = eng.Engine(rules)
    assert len(engine.shared_series) >= 4  # the loss rules' losses, the straggler step times
    assert len(set(engine.shared_series.values())) >= 2
    runs = engine.new_runs()
    for (index, name), (owner, owner_name) in engine.shared_series.items():
        assert runs[index].series[name] is runs[owner].series[owner_name]
    shared = [state_of(engine.scan([(str(log), str(log))], jobs=1)) for log in logs]
    monkeypatch.setattr(patterns, "shared_series", lambda _rules: {})
    engine = eng.Engine(rules)
    alone = [state_of(engine.scan([(str(log), str(log))], jobs=1)) for log in logs]
    for log, with_sharing, without in zip(logs, shared, alone, strict=True):
        assert with_sharing == without, log
