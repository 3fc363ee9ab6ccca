"""A Hugging Face `transformers` TrainerCallback that feeds a `Probe`.

    from trainwreck.probe.huggingface import ProbeCallback
    trainer = Trainer(..., callbacks=[ProbeCallback("runs/exp1")])

Importing this module imports transformers (that is the point of it); `trainwreck.probe` itself
does not.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from trainwreck.probe.recorder import Probe


class ProbeCallback(TrainerCallback):
    """Times every optimizer step (on_step_begin to on_step_end, numbered by `state.global_step`
    after the step, as the Trainer's own logs are) and records the Trainer's logs as metrics.

    Pass a folder (the probe is created at train begin with the Trainer's process index and world
    size, and closed at train end) or a `Probe` you own (then closing it is yours).
    """

    def __init__(self, path_or_probe: str | os.PathLike[str] | Probe, **probe_kwargs: Any) -> None:
        self._owned = not isinstance(path_or_probe, Probe)
        self.probe: Probe | None = None if self._owned else path_or_probe  # type: ignore[assignment]
        self._path = None if not self._owned else path_or_probe
        self._probe_kwargs = probe_kwargs
        self._step: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.probe is None or (self._owned and self.probe.closed):
            kwargs_ = dict(self._probe_kwargs)
            # The Trainer knows the rank even before torch.distributed is initialised.
            kwargs_.setdefault("rank", int(getattr(args, "process_index", 0)))
            kwargs_.setdefault("world_size", int(getattr(args, "world_size", 1)))
            self.probe = Probe(self._path, **kwargs_)  # type: ignore[arg-type]

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.probe is not None:
            self._step = self.probe.step(int(state.global_step) + 1)
            self._step.__enter__()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step, self._step = self._step, None
        if step is not None:
            step.__exit__(None, None, None)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if self.probe is None or not logs:
            return
        values = {key: value for key, value in logs.items() if _is_scalar(value)}
        if values:
            values.pop("step", None)
            self.probe.log(step=int(state.global_step), **values)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.probe is not None and self._owned:
            self.probe.close()


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None
