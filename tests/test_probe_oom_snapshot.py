"""The probe's OOM snapshot hook, against a stand-in for torch (no GPU here): it starts the
trace with the arguments the real API takes and writes one snapshot per OOM, up to `keep`."""

from __future__ import annotations

import sys
import types

import pytest

from trainwreck.probe.oom_snapshot import record_oom_snapshots
from trainwreck.probe.recorder import ProbeWarning


def fake_torch(monkeypatch, calls: list) -> types.ModuleType:
    torch = types.ModuleType("torch")
    memory = types.SimpleNamespace(
        _record_memory_history=lambda **kw: calls.append(("record", kw)),
        _dump_snapshot=lambda path: (calls.append(("dump", path)), open(path, "wb").close()),
    )
    torch.cuda = types.SimpleNamespace(memory=memory)  # type: ignore[attr-defined]
    torch._C = types.SimpleNamespace(  # type: ignore[attr-defined]
        _cuda_attach_out_of_memory_observer=lambda fn: calls.append(("attach", fn))
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    monkeypatch.setenv("RANK", "3")
    return torch


def test_writes_a_snapshot_on_oom(tmp_path, monkeypatch, capsys):
    calls: list = []
    fake_torch(monkeypatch, calls)
    observer = record_oom_snapshots(tmp_path / "run", max_entries=500, keep=1)
    assert calls[0] == ("record", {"enabled": "all", "max_entries": 500})
    assert calls[1] == ("attach", observer)
    observer(0, 2 << 20, 80 << 30, 1 << 20)
    observer(0, 2 << 20, 80 << 30, 1 << 20)  # keep=1: the second OOM writes nothing
    dumps = [c for c in calls if c[0] == "dump"]
    assert dumps == [("dump", str(tmp_path / "run" / "oom-snapshot-rank3-0.pickle"))]
    assert "trainwreck memory replay" in capsys.readouterr().err


def test_needs_the_users_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with pytest.raises(ProbeWarning, match="import torch first"):
        record_oom_snapshots("x")
