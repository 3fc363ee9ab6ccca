"""The probe's framework callbacks, exercised through a tiny real Hugging Face Trainer and a tiny
real Lightning fit. Skipped cleanly when a framework (or torch) is not installed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_valid(events: list[dict[str, Any]]) -> None:
    schema = json.loads((ROOT / "schemas" / "probe-event.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    for event in events:
        assert list(validator.iter_errors(event)) == [], event


def test_lazy_attributes_name_the_callbacks() -> None:
    import trainwreck.probe as probe

    with pytest.raises(AttributeError):
        _ = probe.NoSuchThing


# --- Hugging Face transformers -------------------------------------------------------------------


def test_huggingface_trainer_callback(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer needs it
    from transformers import Trainer, TrainingArguments

    from trainwreck.probe import HFProbeCallback
    from trainwreck.probe.huggingface import ProbeCallback

    assert HFProbeCallback is ProbeCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
            out = self.linear(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, index: int) -> dict[str, Any]:
            x = torch.full((4,), float(index) / 32)
            return {"x": x, "labels": x.sum()}

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        logging_steps=2,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callback = ProbeCallback(tmp_path / "run", gc_min_ms=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(model=Tiny(), args=args, train_dataset=Data(), callbacks=[callback])
        trainer.train()

    assert callback.probe is not None and callback.probe.closed
    events = read_events(tmp_path / "run" / "probe-rank0.jsonl")
    assert_valid(events)
    # One step event per optimizer step (not per micro-batch), numbered as the Trainer logs.
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2, 3, 4, 5, 6]
    metrics = [e for e in events if e["event"] == "metric" and "loss" in e]
    assert [m["step"] for m in metrics] == [2, 4, 6]
    assert all(isinstance(m["loss"], float) for m in metrics)
    assert events[0]["event"] == "start" and events[-1]["event"] == "end"


# --- PyTorch Lightning ---------------------------------------------------------------------------


def _lightning() -> Any:
    pytest.importorskip("torch")
    try:
        import lightning.pytorch as pl
    except ImportError:
        pl = pytest.importorskip("pytorch_lightning")
    return pl


def _fit(pl: Any, tmp_path: Path, callback: Any, fail_at: int | None = None) -> None:
    import torch

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if fail_at is not None and batch_idx == fail_at:
                raise FloatingPointError("loss is nan")
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    x = torch.randn(24, 4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(-1)), batch_size=4)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=2,
        callbacks=[callback],
        default_root_dir=str(tmp_path / "pl"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Tiny(), loader)


def test_lightning_callback(tmp_path: Path) -> None:
    pl = _lightning()
    from trainwreck.probe import LightningProbeCallback
    from trainwreck.probe.lightning import ProbeCallback

    assert LightningProbeCallback is ProbeCallback
    assert isinstance(ProbeCallback(tmp_path), pl.Callback)

    callback = ProbeCallback(tmp_path / "run")
    _fit(pl, tmp_path, callback)
    assert callback.probe is not None and callback.probe.closed
    events = read_events(tmp_path / "run" / "probe-rank0.jsonl")
    assert_valid(events)
    assert [e["step"] for e in events if e["event"] == "step"] == [0, 1, 2, 3, 4, 5]
    metrics = [e for e in events if e["event"] == "metric"]
    # every log_every_n_steps=2 batches, plus at the end of the epoch
    assert len(metrics) == 4 and all(isinstance(m["train_loss"], float) for m in metrics)
    assert events[-1]["event"] == "end" and events[-1]["reason"] == "close"


def test_lightning_callback_records_the_failing_batch(tmp_path: Path) -> None:
    pl = _lightning()
    from trainwreck.probe.lightning import ProbeCallback

    callback = ProbeCallback(tmp_path / "run")
    with pytest.raises(FloatingPointError):
        _fit(pl, tmp_path, callback, fail_at=3)
    events = read_events(tmp_path / "run" / "probe-rank0.jsonl")
    assert_valid(events)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert steps[-1]["error"] == "FloatingPointError" and "error" not in steps[0]
    assert events[-1] == {
        **events[-1],
        "event": "end",
        "reason": "exception",
        "error": "FloatingPointError",
    }


def test_callback_with_a_user_owned_probe(tmp_path: Path) -> None:
    pl = _lightning()
    from trainwreck.probe import Probe
    from trainwreck.probe.lightning import ProbeCallback

    probe = Probe(tmp_path / "run")
    _fit(pl, tmp_path, ProbeCallback(probe))
    assert not probe.closed  # the user's probe stays open for the rest of their script
    probe.log(after_fit=1)
    probe.close()
    events = read_events(probe.path)
    assert len([e for e in events if e["event"] == "step"]) == 6
    assert any(e.get("after_fit") == 1 for e in events)
