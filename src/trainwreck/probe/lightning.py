"""A PyTorch Lightning Callback that feeds a `Probe`.

    from trainwreck.probe.lightning import ProbeCallback
    trainer = L.Trainer(..., callbacks=[ProbeCallback("runs/exp1")])

Built on `lightning.pytorch` when installed, else on the older `pytorch_lightning` package
(Lightning checks callbacks with isinstance, so the base class must come from the package the
Trainer comes from; `ProbeCallback.__module__` tells which one it is here as `BASE`).
"""

from __future__ import annotations

import os
from typing import Any

try:
    from lightning.pytorch import Callback

    BASE = "lightning.pytorch"
except ImportError:  # the standalone package, still common
    from pytorch_lightning import Callback  # type: ignore[no-redef]

    BASE = "pytorch_lightning"

from trainwreck.probe.recorder import Probe


class ProbeCallback(Callback):
    """Times every training batch (on_train_batch_start to on_train_batch_end, numbered by the
    probe's own counter, identical on every rank) and records the Trainer's logged metrics every
    `log_every_n_steps` batches (when Lightning itself logs, so no extra device sync).

    Pass a folder (the probe is created at setup with the Trainer's global rank and world size, and
    closed at teardown or on an exception) or a `Probe` you own.
    """

    def __init__(self, path_or_probe: str | os.PathLike[str] | Probe, **probe_kwargs: Any) -> None:
        super().__init__()
        self._owned = not isinstance(path_or_probe, Probe)
        self.probe: Probe | None = None if self._owned else path_or_probe  # type: ignore[assignment]
        self._path = None if not self._owned else path_or_probe
        self._probe_kwargs = probe_kwargs
        self._step: Any = None
        self._batches = 0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and (self.probe is None or (self._owned and self.probe.closed)):
            kwargs = dict(self._probe_kwargs)
            kwargs.setdefault("rank", int(trainer.global_rank))
            kwargs.setdefault("world_size", int(trainer.world_size))
            self.probe = Probe(self._path, **kwargs)  # type: ignore[arg-type]

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.probe is not None:
            self._step = self.probe.step()
            self._step.__enter__()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step, self._step = self._step, None
        if step is not None:
            step.__exit__(None, None, None)
        self._batches += 1
        every = max(1, int(getattr(trainer, "log_every_n_steps", 50) or 50))
        if self.probe is not None and self._batches % every == 0:
            self._log_metrics(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.probe is not None:
            self._log_metrics(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        step, self._step = self._step, None
        if step is not None:  # the batch that raised: its step event carries the error name
            step.__exit__(type(exception), exception, exception.__traceback__)
        if self.probe is not None and self._owned:
            self.probe.close("exception", type(exception).__name__)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and self.probe is not None and self._owned:
            self.probe.close()

    def _log_metrics(self, trainer: Any) -> None:
        values: dict[str, Any] = {}
        for name, value in dict(getattr(trainer, "callback_metrics", {}) or {}).items():
            numel = getattr(value, "numel", None)
            if callable(numel) and numel() != 1:
                continue  # only scalars are metrics
            values[str(name)] = value
        if values and self.probe is not None:
            values.pop("step", None)
            self.probe.log(step=int(trainer.global_step), **values)
