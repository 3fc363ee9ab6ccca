"""The probe's fingerprints as Prometheus alerting rules, over the metrics `trainwreck.probe.
prometheus` exposes (names in `probe.metric_names`).

Only fingerprints with a faithful PromQL form are here; each takes its thresholds from the rule
that detects the same fingerprint in logs, so an alert and `trainwreck diagnose` agree:

| alert | rule (detector) | PromQL |
|---|---|---|
| TrainwreckGcLongPauses | gc-straggler-probe-gc (long_gc) | full (generation 2) collections above the rule's threshold, counted over a window |
| TrainwreckStepTimeStall | gc-straggler-step-time (stalls) | the mean step time over 1m against its rolling 30m median: the rule's min_ratio and min_excess |
| TrainwreckGcStraggler | both | stalls while long collections happen in the same job: the GC straggler |
| TrainwreckCudaMallocRetriesRising | allocator-fragmentation-drift (retries_up) | cudaMalloc retries rising by the rule's min_delta |
| TrainwreckNanLoss | nan-loss-value (probe_nan, probe_inf) | the logged loss is NaN or infinite |

Recording rules compute the step-time ratio once, so that a Grafana panel can plot it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainwreck.export.rulefile import AlertRule, RecordingRule, alert_name, quote_string
from trainwreck.probe import metric_names as names
from trainwreck.rules.rule import Rule

DEFAULT_WINDOW = "15m"
DEFAULT_LOSS_METRIC = "loss"
# recording rules (level:metric:operations, the Prometheus naming convention)
STEP_MEAN = "trainwreck:step_seconds:mean1m"
STEP_MEDIAN = "trainwreck:step_seconds:median30m"
STEP_RATIO = "trainwreck:step_seconds:ratio_to_median30m"


@dataclass(frozen=True)
class PrometheusExport:
    recordings: tuple[RecordingRule, ...]
    alerts: tuple[AlertRule, ...]
    not_exported: tuple[tuple[str, str], ...]  # (alert, why)


RECORDINGS = (
    RecordingRule(
        STEP_MEAN,
        f"rate({names.STEP_SECONDS}_sum[1m]) / rate({names.STEP_SECONDS}_count[1m])",
    ),
    RecordingRule(STEP_MEDIAN, f"quantile_over_time(0.5, {STEP_MEAN}[30m:1m])"),
    RecordingRule(STEP_RATIO, f"{STEP_MEAN} / {STEP_MEDIAN}"),
)


def _seconds(ms: float) -> str:
    return f"{ms / 1000.0:g}"


class _Missing(Exception):
    pass


def _settings(rules: Mapping[str, Rule], rule_id: str, detector: str) -> Any:
    rule = rules.get(rule_id)
    if rule is None or detector not in rule.detectors:
        raise _Missing(f"rule '{rule_id}' with detector '{detector}' is not in the rule set")
    return rule.detectors[detector].settings


def _long_gc(rules: Mapping[str, Rule], window: str) -> str:
    settings = _settings(rules, "gc-straggler-probe-gc", "long_gc")
    bound = float(settings.above) / 1000.0
    if bound not in names.GC_BUCKETS:
        raise _Missing(f"the rule's GC threshold {settings.above} ms is not a histogram bound")
    le = quote_string(repr(bound))
    pauses = f'{names.GC_PAUSE_SECONDS}_count{{generation="2"}}'
    at_most = f'{names.GC_PAUSE_SECONDS}_bucket{{generation="2",le={le}}}'
    return (
        f"sum by (job, rank) (increase({pauses}[{window}]) - ignoring (le) "
        f"increase({at_most}[{window}])) >= {settings.min_count}"
    )


def _stall(rules: Mapping[str, Rule], window: str) -> str:
    settings = _settings(rules, "gc-straggler-step-time", "stalls")
    return (
        f"{STEP_RATIO} >= {settings.min_ratio:g} "
        f"and ({STEP_MEAN} - {STEP_MEDIAN}) >= {_seconds(settings.min_excess)}"
    )


def _gc_straggler(rules: Mapping[str, Rule], window: str) -> str:
    return (
        f"max by (job) ({_stall(rules, window)}) "
        f"and on (job) max by (job) ({_long_gc(rules, window)})"
    )


def _retries(rules: Mapping[str, Rule], window: str) -> str:
    settings = _settings(rules, "allocator-fragmentation-drift", "retries_up")
    return f"increase({names.CUDA_ALLOC_RETRIES}[{window}]) >= {settings.min_delta:g}"


@dataclass(frozen=True)
class AlertSpec:
    name: str
    rule: str  # the rule whose fingerprint it is (its entry labels the alert)
    expr: Callable[[Mapping[str, Rule], str], str]
    for_: str
    what: str


def _nan_loss(metric: str) -> Callable[[Mapping[str, Rule], str], str]:
    def expr(rules: Mapping[str, Rule], window: str) -> str:
        if "nan-loss-value" not in rules:
            raise _Missing("rule 'nan-loss-value' is not in the rule set")
        loss = f"{names.METRIC}{{name={quote_string(metric)}}}"
        return f"({loss} != {loss}) or (abs({loss}) == +Inf)"

    return expr


def specs(loss_metric: str) -> tuple[AlertSpec, ...]:
    return (
        AlertSpec(
            "GcLongPauses",
            "gc-straggler-probe-gc",
            _long_gc,
            "0m",
            "full garbage collections longer than the straggler threshold",
        ),
        AlertSpec(
            "StepTimeStall",
            "gc-straggler-step-time",
            _stall,
            "2m",
            "steps slower than their rolling median (a stall; see the GC straggler alert for the cause)",
        ),
        AlertSpec(
            "GcStraggler",
            "gc-straggler-probe-gc",
            _gc_straggler,
            "2m",
            "step-time stalls while long garbage collections run in the same job",
        ),
        AlertSpec(
            "CudaMallocRetriesRising",
            "allocator-fragmentation-drift",
            _retries,
            "0m",
            "the caching allocator is freeing its cache and retrying cudaMalloc",
        ),
        AlertSpec(
            "NanLoss",
            "nan-loss-value",
            _nan_loss(loss_metric),
            "0m",
            f"the logged '{loss_metric}' is NaN or infinite",
        ),
    )


def export(
    rules: list[Rule],
    entries: Mapping[str, Mapping[str, Any]],
    *,
    window: str = DEFAULT_WINDOW,
    loss_metric: str = DEFAULT_LOSS_METRIC,
) -> PrometheusExport:
    by_id = {rule.id: rule for rule in rules}
    alerts, missing = [], []
    for spec in specs(loss_metric):
        name = alert_name("trainwreck", spec.name)
        try:
            expr = spec.expr(by_id, window)
        except _Missing as exc:
            missing.append((name, str(exc)))
            continue
        rule = by_id[spec.rule]
        entry = entries.get(rule.entry, {})
        alerts.append(
            AlertRule(
                alert=name,
                expr=expr,
                for_=spec.for_,
                labels={
                    "severity": str(entry.get("severity") or "unknown"),
                    "entry": rule.entry,
                    "rule": rule.id,
                    "source": "trainwreck",
                },
                annotations={
                    "summary": f"{entry.get('title') or rule.title}: {spec.what}",
                    "description": str(entry.get("quick_answer") or rule.title),
                    "runbook_url": str(entry.get("url") or ""),
                },
            )
        )
    return PrometheusExport(RECORDINGS, tuple(alerts), tuple(missing))
