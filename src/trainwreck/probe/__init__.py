"""Record a training run's fingerprint signals (step times, GC pauses, CUDA allocator state,
metrics) as JSON lines, with negligible overhead.

    from trainwreck.probe import Probe
    probe = Probe("runs/exp1")      # runs/exp1/probe-rank{R}.jsonl
    for batch in loader:
        with probe.step():
            train_step(batch)
    probe.close()

Framework callbacks are imported lazily so that this package never imports torch, transformers
or lightning by itself: `trainwreck.probe.huggingface.ProbeCallback` (a transformers
TrainerCallback) and `trainwreck.probe.lightning.ProbeCallback` (a Lightning Callback), also
reachable here as `HFProbeCallback` and `LightningProbeCallback`.
`trainwreck.probe.oom_snapshot.record_oom_snapshots` writes a memory snapshot on a CUDA OOM for
`trainwreck memory replay`.
"""

from __future__ import annotations

from typing import Any

from trainwreck.probe.recorder import (
    FILE_TEMPLATE,
    SCHEMA_VERSION,
    Probe,
    ProbeWarning,
    detect_rank,
)

__all__ = [
    "FILE_TEMPLATE",
    "SCHEMA_VERSION",
    "HFProbeCallback",
    "LightningProbeCallback",
    "Probe",
    "ProbeWarning",
    "detect_rank",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing a framework costs seconds and must only happen when the user asks for it.
    if name == "HFProbeCallback":
        from trainwreck.probe.huggingface import ProbeCallback

        return ProbeCallback
    if name == "LightningProbeCallback":
        from trainwreck.probe.lightning import ProbeCallback

        return ProbeCallback
    raise AttributeError(f"module 'trainwreck.probe' has no attribute {name!r}")
