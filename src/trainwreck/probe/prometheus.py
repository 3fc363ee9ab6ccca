"""The probe's signals as Prometheus metrics (needs `prometheus_client`, an optional dependency).

    from trainwreck.probe.prometheus import serve
    serve("runs/exp1", port=9400)       # a scrape target for every probe-rank*.jsonl there

The exporter follows the probe's JSON-lines files instead of hooking into the recorder, so the
training loop pays nothing more, and one process (in the job, or beside it on the node) can
expose every rank of a run folder. Each scrape reads what the files gained since the last one:
step durations and GC pauses as histograms, the CUDA allocator's last state, and the last value
of every user metric (NaN and infinities included, which the NaN-loss alert looks for). Metric
names are in `metric_names`. A line that is not a probe event is skipped.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from trainwreck.probe import metric_names as names
from trainwreck.probe.recorder import FILE_TEMPLATE

MAX_READ = 64 << 20  # bytes read per file per scrape: a huge backlog is caught up over scrapes
MAX_LINE = 1 << 20  # a partial line longer than this is dropped
MAX_METRICS = 256  # user metric names kept per rank
_GLOB = FILE_TEMPLATE.replace("{rank}", "*")
_CUDA_GAUGES = (
    (
        "allocated_bytes",
        names.CUDA_ALLOCATED_BYTES,
        "bytes allocated by PyTorch's caching allocator",
    ),
    (
        "reserved_bytes",
        names.CUDA_RESERVED_BYTES,
        "bytes the caching allocator holds from the driver",
    ),
    ("inactive_split_bytes", names.CUDA_INACTIVE_SPLIT_BYTES, "bytes in inactive split blocks"),
)
_CUDA_COUNTERS = (
    ("alloc_retries", names.CUDA_ALLOC_RETRIES, "cudaMalloc retries after freeing the cache"),
    ("ooms", names.CUDA_OOMS, "out-of-memory errors the allocator raised"),
)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bound, not cumulative
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)
        self.n += 1
        self.total += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break

    def buckets(self) -> list[tuple[str, int]]:
        counts = self.counts or [0] * len(self.bounds)
        out, running = [], 0
        for bound, count in zip(self.bounds, counts, strict=True):
            running += count
            out.append((repr(float(bound)), running))
        out.append(("+Inf", self.n))
        return out


@dataclass
class RankState:
    steps: Histogram = field(default_factory=lambda: Histogram(names.STEP_BUCKETS))
    step_errors: int = 0
    gc: dict[int, Histogram] = field(default_factory=dict)
    cuda: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    last_event: float | None = None


@dataclass
class _Tail:
    offset: int = 0
    partial: bytes = b""


class ProbeCollector:
    """A prometheus_client collector over a run folder's probe files (read on each scrape)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.ranks: dict[str, RankState] = {}
        self._tails: dict[Path, _Tail] = {}
        self._lock = threading.Lock()  # two scrapes at once must not read a file twice

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self.update()
            yield from self.families()

    def update(self) -> None:
        """Read what every probe file gained since the last call."""
        for path in sorted(self.folder.glob(_GLOB)):
            tail = self._tails.setdefault(path, _Tail())
            try:
                with open(path, "rb") as handle:
                    size = handle.seek(0, 2)
                    if size < tail.offset:  # the file was replaced: read it from the start
                        tail.offset, tail.partial = 0, b""
                    handle.seek(tail.offset)
                    data = handle.read(MAX_READ)
            except OSError:
                continue
            tail.offset += len(data)
            lines = (tail.partial + data).split(b"\n")
            tail.partial = lines.pop()
            if len(tail.partial) > MAX_LINE:
                tail.partial = b""
            for line in lines:
                self.read_line(line)

    def read_line(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("v") != 1:
            return
        state = self.ranks.setdefault(str(event.get("rank", "?"))[:64], RankState())
        when = _number(event.get("t"))
        if when is not None and math.isfinite(when):
            state.last_event = when
        kind = event.get("event")
        if kind == "step":
            duration = _number(event.get("duration_ms"))
            if duration is not None and math.isfinite(duration):
                state.steps.observe(duration / 1000.0)
            if event.get("error") is not None:
                state.step_errors += 1
        elif kind == "gc":
            duration = _number(event.get("duration_ms"))
            generation = event.get("generation")
            if duration is not None and isinstance(generation, int) and 0 <= generation <= 2:
                histogram = state.gc.setdefault(generation, Histogram(names.GC_BUCKETS))
                histogram.observe(duration / 1000.0)
        elif kind == "cuda_memory":
            for key, _, _ in (*_CUDA_GAUGES, *_CUDA_COUNTERS):
                value = _number(event.get(key))
                if value is not None:
                    state.cuda[key] = value
        elif kind == "metric":
            for key, raw in event.items():
                if key in ("v", "t", "rank", "event", "step"):
                    continue
                value = _number(raw)
                if value is None:
                    continue
                if key in state.metrics or len(state.metrics) < MAX_METRICS:
                    state.metrics[str(key)[:200]] = value

    def families(self) -> list[Metric]:
        steps = HistogramMetricFamily(
            names.STEP_SECONDS, "training step durations", labels=["rank"]
        )
        errors = CounterMetricFamily(names.STEP_ERRORS, "steps that raised", labels=["rank"])
        gc = HistogramMetricFamily(
            names.GC_PAUSE_SECONDS,
            "Python garbage collection pauses the probe recorded",
            labels=["rank", "generation"],
        )
        gauges = {key: GaugeMetricFamily(n, h, labels=["rank"]) for key, n, h in _CUDA_GAUGES}
        counters = {key: CounterMetricFamily(n, h, labels=["rank"]) for key, n, h in _CUDA_COUNTERS}
        metric = GaugeMetricFamily(
            names.METRIC, "last value of a metric logged with probe.log", labels=["rank", "name"]
        )
        last = GaugeMetricFamily(names.LAST_EVENT, "time of the last probe event", labels=["rank"])
        for rank, state in sorted(self.ranks.items()):
            steps.add_metric([rank], state.steps.buckets(), state.steps.total)
            errors.add_metric([rank], state.step_errors)
            for generation, histogram in sorted(state.gc.items()):
                gc.add_metric([rank, str(generation)], histogram.buckets(), histogram.total)
            for key, value in state.cuda.items():
                family = gauges.get(key) or counters[key]
                family.add_metric([rank], value)
            for name, value in sorted(state.metrics.items()):
                metric.add_metric([rank, name], value)
            if state.last_event is not None:
                last.add_metric([rank], state.last_event)
        return [steps, errors, gc, *gauges.values(), *counters.values(), metric, last]


def _number(value: Any) -> float | None:
    """A JSON number, or the probe's spellings of NaN and infinities; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    return None


def registry_for(folder: str | Path) -> CollectorRegistry:
    """A registry holding only the probe collector of `folder`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProbeCollector(folder))
    return registry


def serve(folder: str | Path, port: int = 9400, addr: str = "127.0.0.1") -> Any:
    """Expose `folder`'s probe files at http://addr:port/metrics from a daemon thread; returns
    prometheus_client's (server, thread)."""
    return start_http_server(port, addr=addr, registry=registry_for(folder))
