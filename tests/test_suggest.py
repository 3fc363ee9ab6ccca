"""Suggestions when no rule fires: a small TF-IDF index over entries' words and rule examples,
built at compile time; marked as suggestions, exit code 0, none on healthy logs."""

from __future__ import annotations

import json
from pathlib import Path

from trainwreck.cli import main
from trainwreck.compile.packs import resolve
from trainwreck.diagnose import diagnose
from trainwreck.engine import suggest

ROOT = Path(__file__).resolve().parents[1]


def test_unknown_wording_gets_suggestions_not_findings(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(
        "epoch 3 step 120 loss 2.31\n"
        "RuntimeError: DataLoader worker (pid 8102) is killed by signal: Terminated.\n"
    )
    code = main(["diagnose", str(log), "--root", str(ROOT), "--no-installed", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["findings"] == []
    entries = [s["entry"] for s in data["suggestions"]]
    assert entries and entries[0].startswith("dataloader-")
    assert data["suggestions"][0]["line"].endswith(
        "train.log:2: RuntimeError: DataLoader worker (pid 8102) is killed by signal: Terminated."
    )
    assert 0 < data["suggestions"][0]["score"] <= 1
    main(["diagnose", str(log), "--root", str(ROOT), "--no-installed"])
    text = capsys.readouterr().out
    assert "Suggestions (not findings" in text and "No known failure found." in text


def test_no_suggestions_on_healthy_logs():
    rule_set = resolve(ROOT, use_installed=False)
    healthy = sorted(p for p in (ROOT / "tests" / "logs").rglob("*") if "healthy" in p.name)
    assert len(healthy) >= 5
    for path in healthy:
        report = diagnose([str(path)], ROOT, rule_set=rule_set)
        assert report.suggestions == [], path


def test_no_suggestions_when_a_rule_fired(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    report = diagnose([str(log)], ROOT, rule_set=resolve(ROOT, use_installed=False))
    assert report.entries == ["cuda-illegal-memory-access"] and report.suggestions == []


def test_index_is_built_at_compile_time(tmp_path):
    assert (
        main(
            [
                "compile",
                "--root",
                str(ROOT),
                "--no-wheel",
                "--no-tests",
                "--bundle",
                str(tmp_path / "b.json"),
            ]
        )
        == 0
    )
    bundle = json.loads((tmp_path / "b.json").read_text())
    index = bundle["text_index"]
    assert set(index) == {r["entry"] for r in bundle["rules"]}
    # Rule examples feed the index: NCCL's own WARN wording is among nccl-error's terms.
    assert index["nccl-error"]["socketprogress"] >= 1


def test_similarity_prefers_the_entry_that_shares_rare_words():
    index = suggest.Index.from_counts(
        {
            "a": {"watchdog": 3, "timeout": 2, "collective": 1},
            "b": {"timeout": 1, "socket": 4, "bind": 2},
        }
    )
    scores = index.scores("Watchdog caught collective operation timeout")
    assert scores[index.entries.index("a")] > scores[index.entries.index("b")] > 0
    assert not index.scores("12345 0x7f 3.5").any()


def _suggested(tmp_path: Path, text: str) -> list[dict]:
    log = tmp_path / "train.log"
    log.write_text(text)
    report = diagnose([str(log)], ROOT, rule_set=resolve(ROOT, use_installed=False))
    assert report.findings == []
    return [s.to_json() for s in report.suggestions]


def test_a_loss_scale_error_no_rule_names_gets_the_numerics_entries(tmp_path):
    """Issue 33: "Unexpected loss scale nan ... grad norm inf" gave nothing at all."""
    found = _suggested(
        tmp_path,
        "step 100 loss 2.31\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 80, in <module>\n'
        "    scaler.step(optimizer)\n"
        "ValueError: Unexpected loss scale nan, grad norm inf\n",
    )
    entries = [s["entry"] for s in found]
    assert {"nan-loss", "fp16-loss-scale-collapse"} <= set(entries), found
    assert all(
        s["line"].endswith("train.log:5: ValueError: Unexpected loss scale nan, grad norm inf")
        for s in found
    )
    # why: the words the line shares with each entry
    assert {"nan", "inf"} & set(found[0]["shared"])


def test_a_state_dict_key_error_is_read_with_its_traceback(tmp_path):
    """A bare KeyError names a parameter; the frame above it says load_state_dict."""
    found = _suggested(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        '    model.load_state_dict(state["model"])\n'
        '  File "train.py", line 22, in load\n'
        "    param = state_dict[name]\n"
        "KeyError: 'model.layers.0.self_attn.q_proj.weight'\n",
    )
    entries = [s["entry"] for s in found]
    assert "state-dict-key-mismatch" in entries[:2], found
    mismatch = next(s for s in found if s["entry"] == "state-dict-key-mismatch")
    assert "load_state_dict" in mismatch["shared"] or "state_dict" in mismatch["shared"]
    # the line is read with the code lines of its traceback (the frame headers left out)
    lines = suggest.error_lines([("x.log", str(tmp_path / "train.log"))])
    assert lines[-1].context.splitlines() == [
        'model.load_state_dict(state["model"])',
        "param = state_dict[name]",
    ]
