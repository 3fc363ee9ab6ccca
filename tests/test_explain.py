"""`trainwreck explain LOG... RULE`: matchers to lines, near misses, series, detectors, the
condition's names and verdict; exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from trainwreck.cli import main
from trainwreck.explain import explain

ROOT = Path(__file__).resolve().parents[1]
GC = ROOT / "tests" / "logs" / "python-gc-straggler" / "megatron-gc-stalls.log"


def test_fired_rule_shows_lines_values_and_verdict(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text(
        "step 1\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1002.00 MiB. "
        "GPU 1 has a total capacity of 8.00 GiB of which 0 bytes is free. Of the allocated memory "
        "13.98 GiB is allocated by PyTorch, and 129.48 MiB is reserved by PyTorch but unallocated.\n"
    )
    data = explain([str(log)], "cuda-oom-capacity-oom", ROOT, use_installed=False)
    assert data.fired is True
    lines = data.matchers["oom_current"].lines
    assert [(Path(x.file).name, x.line, x.rank) for x in lines] == [("oom.log", 2, 1)]
    assert data.condition_names["oom_current"].to_json() == {"true": True, "count": 1.0}
    assert data.condition_names["oom_current.unalloc"].values == (129.48 * 2**20,)
    assert data.why.startswith("rule fired")


def test_missed_rule_shows_near_misses(tmp_path, capsys):
    log = tmp_path / "worker.log"
    log.write_text("RuntimeError: DataLoader worker (pid 8102) is killed by signal: Terminated.\n")
    code = main(
        ["explain", str(log), "dataloader-worker-killed-oom", "--root", str(ROOT), "--no-installed"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "rule did not fire" in out and "false: killed, worker_oom" in out
    assert f"near miss {log}:1: RuntimeError: DataLoader worker (pid 8102)" in out


def test_series_and_detectors_are_reported(capsys):
    code = main(
        [
            "explain",
            str(GC),
            "gc-straggler-step-time",
            "--root",
            str(ROOT),
            "--no-installed",
            "--format",
            "json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == (0 if data["fired"] else 1)
    # a log without rank prefixes: its series is labelled by its file
    assert data["series"]["step_ms"][f"unranked ({GC})"]["points"] > 100
    assert data["detectors"]["stalls"]["fired"] is True
    assert data["detectors"]["stalls"]["outputs"]["count"] >= 3
    assert "stalls" in data["condition_names"]


def test_usage_errors(tmp_path, capsys):
    log = tmp_path / "a.log"
    log.write_text("x\n")
    assert main(["explain", str(log), "no-such-rule", "--root", str(ROOT), "--no-installed"]) == 2
    assert "no rule or entry 'no-such-rule'" in capsys.readouterr().err
    assert (
        main(["explain", str(tmp_path / "missing.log"), "nan-loss-value", "--root", str(ROOT)]) == 2
    )
    assert "no such file" in capsys.readouterr().err
    assert main(["explain", "nan-loss-value", "--root", str(ROOT)]) == 2


def test_an_entry_id_explains_each_of_its_rules(capsys):
    """The id diagnose prints for a finding is an entry id: explain takes it, one block per rule."""
    log = ROOT / "tests" / "logs" / "host-oom-sigkill" / "torch2.4-torchrun-8ranks-sigkill.log"
    args = ["explain", str(log), "host-oom-sigkill", "--root", str(ROOT), "--no-installed"]
    assert main([*args, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    rule_ids = [x["rule"]["id"] for x in (shown if isinstance(shown, list) else [shown])]
    assert rule_ids and all(
        x["rule"]["entry"] == "host-oom-sigkill"
        for x in (shown if isinstance(shown, list) else [shown])
    )
    assert main(args) == 0
    out = capsys.readouterr().out
    assert all(f"rule {rule_id} (host-oom-sigkill)" in out for rule_id in rule_ids)


def test_a_mistyped_id_gets_the_close_ids(tmp_path, capsys):
    log = tmp_path / "a.log"
    log.write_text("x\n")
    assert (
        main(["explain", str(log), "host-oom-sigkil", "--root", str(ROOT), "--no-installed"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("trainwreck: no rule or entry 'host-oom-sigkil'; did you mean ")
    assert "host-oom-sigkill" in err and "api-renamed-argument" not in err
    assert err.count("\n") == 1


def test_rules_lists_ids_entries_and_titles(capsys):
    assert main(["rules", "--root", str(ROOT), "--no-installed", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rule_files = list((ROOT / "rules").glob("*.yaml"))
    assert len(rows) >= len(rule_files) and all(row["title"] for row in rows)
    assert {
        k: v
        for k, v in next(r for r in rows if r["id"] == "cuda-oom-capacity-oom").items()
        if k != "title"
    } == {"id": "cuda-oom-capacity-oom", "entry": "cuda-oom-capacity"}
    assert main(["rules", "--root", str(ROOT), "--no-installed", "--entry", "nan-loss"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(" nan-loss: " in line for line in lines)
    assert main(["rules", "--root", str(ROOT), "--no-installed", "--entry", "nan-los"]) == 2
    assert "did you mean nan-loss" in capsys.readouterr().err


def test_every_command_help_has_an_example(capsys):
    from trainwreck.cli import COMMANDS

    for command in COMMANDS:
        try:
            main([command, "--help"])
        except SystemExit as done:
            assert done.code == 0
        out = capsys.readouterr().out
        examples = out.split("examples:\n", 1)[1].splitlines()
        assert examples and all(
            line.startswith(f"  trainwreck {command}") or f"| trainwreck {command}" in line
            for line in examples
        ), (command, out)
