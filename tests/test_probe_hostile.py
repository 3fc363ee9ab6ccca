"""The probe never raises into training and bounds every buffer (issue 10): hostile metric
objects, warnings turned into errors, impossible paths, huge numbers, and a producer that
outpaces the writer."""

from __future__ import annotations

import json
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from trainwreck.probe import Probe, ProbeWarning
from trainwreck.probe import recorder as rec


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class Hostile:
    """A metric whose .item(), str() and repr() all raise."""

    def item(self) -> float:
        raise RuntimeError("item")

    def __float__(self) -> float:
        raise RuntimeError("float")

    def __str__(self) -> str:
        raise RuntimeError("str")

    def __repr__(self) -> str:
        raise RuntimeError("repr")


def test_a_metric_that_cannot_be_converted_or_printed_is_recorded_by_type(
    tmp_path: Path,
) -> None:
    probe = Probe(tmp_path, rank=0, record_gc=False, flush_interval=3600)
    probe.log(weird=Hostile(), loss=0.5)
    probe.event(Hostile(), value=Hostile())  # type: ignore[arg-type]
    probe.close()
    events = read_events(probe.path)
    metric = next(e for e in events if e["event"] == "metric")
    assert metric["loss"] == 0.5
    assert metric["weird"] == "<unprintable Hostile>"
    custom = [e for e in events if e["event"] not in ("start", "metric", "end")]
    assert custom == [
        {**custom[0], "event": "<unprintable Hostile>", "value": "<unprintable Hostile>"}
    ]


def test_huge_integers_do_not_drop_the_event(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rank=0, record_gc=False, flush_interval=3600)
    probe.log(huge=10**5000, negative=-(10**5000), big=2**80, loss=0.25)
    probe.close()
    metric = next(e for e in read_events(probe.path) if e["event"] == "metric")
    assert metric["loss"] == 0.25
    assert metric["huge"] == "Infinity" and metric["negative"] == "-Infinity"
    assert metric["big"] == float(2**80)


def test_a_non_finite_step_number_falls_back_to_the_counter(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rank=0, record_gc=False, flush_interval=3600)
    with probe.step(float("inf")):  # type: ignore[arg-type]
        pass
    probe.close()
    steps = [e for e in read_events(probe.path) if e["event"] == "step"]
    assert [s["step"] for s in steps] == [0]


def test_warnings_as_errors_never_raise_from_the_probe(tmp_path: Path) -> None:
    # `python -W error`: the probe's own ProbeWarning becomes an exception inside warnings.warn
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "probe-rank0.jsonl").symlink_to("/dev/full")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (tmp_path / "a-file").write_text("")
        blocked = Probe(tmp_path / "a-file" / "run", rank=0)  # cannot create the folder
        assert not blocked.recording
        full = Probe(tmp_path / "full", rank=0, record_gc=False, flush_interval=3600)
        with full.step():
            pass
        full.flush()  # ENOSPC: stops recording, warns (an error here) and must not raise
        assert not full.recording
        for probe in (blocked, full):
            probe.log(x=1)
            probe.flush()
            probe.close()


@pytest.mark.parametrize("path", ["runs/a\x00b", 12345, None])
def test_an_impossible_path_never_raises_from_the_constructor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = Probe(path, rank="not a rank")  # type: ignore[arg-type]
        probe.log(x=1)
        with probe.step():
            pass
        probe.flush()
        probe.close()
    assert not probe.recording
    assert [w.category for w in caught] == [ProbeWarning]


class _Producer(deque):  # type: ignore[type-arg]
    """A buffer whose producer outpaces the writer: each record taken out is replaced at once."""

    def __init__(self, maxlen: int, refills: int) -> None:
        super().__init__(maxlen=maxlen)
        self.refills = refills

    def popleft(self) -> Any:
        record = super().popleft()
        if self.refills > 0:
            self.refills -= 1
            self.append(("step", time.time_ns(), 0, 1000, 0, None))
        return record


def test_the_writer_drains_in_bounded_batches(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rank=0, record_gc=False, flush_interval=3600, max_buffer=1000)
    probe._stop.set()  # drain only when this test says so
    probe._wake.set()
    producer = _Producer(maxlen=1000, refills=200_000)
    for _ in range(1000):
        producer.append(("step", time.time_ns(), 0, 1000, 0, None))
    probe._buffer = producer
    batches: list[int] = []
    write = probe._write

    def counting(lines: list[str]) -> None:
        batches.append(len(lines))
        write(lines)

    probe._write = counting  # type: ignore[method-assign]
    probe.flush()
    # one flush takes at most what the buffer held when it started, written in bounded batches;
    # the rest waits for the next flush instead of growing a list without bound
    assert sum(batches) <= 1000
    assert max(batches) <= rec.MAX_BATCH
    probe.close()


def test_long_strings_are_cut_and_the_line_says_so(tmp_path: Path) -> None:
    """A 10 MB string metric became a 10 MB line (audit 5.6): values, names and event names are
    cut at MAX_TEXT characters, and the cut value says how long it was."""
    huge = "x" * 10_000_000
    probe = Probe(tmp_path, rank=0, record_gc=False, flush_interval=3600)
    probe.log(note=huge, **{"k" * 100_000: 1}, loss=0.5)
    probe.event("y" * 100_000, detail=huge)
    probe.log(short="fits")
    probe.close()
    lines = probe.path.read_text(encoding="utf-8").splitlines()
    assert max(len(line) for line in lines) < 4 * rec.MAX_TEXT
    events = read_events(probe.path)
    metric = next(e for e in events if e["event"] == "metric" and "note" in e)
    assert metric["loss"] == 0.5
    assert metric["note"].startswith("x" * 100)
    assert metric["note"].endswith(f"[cut: 10,000,000 characters, the first {rec.MAX_TEXT:,} kept]")
    assert any(key.startswith("kkk") and key.endswith("kept]") for key in metric)
    custom = next(e for e in events if e["event"].startswith("yyy"))
    assert custom["detail"].endswith("kept]")
    assert next(e for e in events if e.get("short"))["short"] == "fits"
