"""`trainwreck diagnose` end to end: formats, exit codes, inputs (folders, globs, .gz, stdin),
bad and pathological input, ranking and competing hypotheses, initiating rank, imports."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainwreck.cli import main
from trainwreck.diagnose import diagnose

ROOT = Path(__file__).resolve().parents[1]
GC = ROOT / "tests" / "logs" / "python-gc-straggler"
FRAG = ROOT / "tests" / "logs" / "cuda-allocator-fragmentation"


def cli(
    *args: str, stdin: bytes | None = None, cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainwreck", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def run_json(*paths: str, rules: list[str] | None = None) -> dict:
    args = ["diagnose", *paths, "--format", "json", "--no-installed"]
    for rule in rules or []:
        args += ["--rule", rule]
    done = cli(*args)
    assert done.returncode in (0, 1), done.stderr.decode()
    assert b"Traceback" not in done.stderr
    return json.loads(done.stdout)


# --- the seed failures, end to end through the CLI -------------------------------------------


def test_gc_straggler_found_in_multi_rank_logs_buried_among_other_lines():
    report = run_json(str(GC / "plain-loop-4ranks"))
    # The noise lines include torch's lr_scheduler-before-optimizer warning: a real, weaker finding.
    entries = [f["entry"] for f in report["findings"]]
    assert entries[0] == "python-gc-straggler"
    assert set(entries) <= {"python-gc-straggler", "lr-scheduler-before-optimizer-step"}
    finding = report["findings"][0]
    assert finding["ranks"] == [0, 1, 2, 3]
    assert set(finding) >= {
        "entry",
        "rule",
        "title",
        "confidence",
        "ranks",
        "initiating_rank",
        "evidence",
        "root_cause",
        "fix",
        "verify",
        "url",
    }
    for item in finding["evidence"]:
        assert set(item) >= {"file", "line", "text"}
        assert "step" in item["text"]
    # a configured site, the local build (if one was built here) or no link: tests/test_links.py
    local = (ROOT / "site/entries/python-gc-straggler/index.html").resolve().as_uri()
    assert finding["url"] in ("", local) or finding["url"].endswith("entries/python-gc-straggler/")


def test_gc_straggler_is_stronger_with_probe_gc_events():
    text_only = run_json(str(GC / "torchrun-interleaved.log"))["findings"][0]
    with_probe = run_json(str(GC / "probe-run"))["findings"][0]
    assert with_probe["confidence"] > text_only["confidence"]
    assert "gc-straggler-probe-gc" in with_probe["rules"]
    assert with_probe["initiating_rank"] == 0  # the rank whose collections were long


def test_fragmentation_oom_found_in_both_wordings():
    for log in (
        "oom-current-hf-trainer.log",
        "oom-legacy-deepspeed.log",
        "oom-torch21-wording.log.gz",
    ):
        report = run_json(str(FRAG / log))
        assert [f["entry"] for f in report["findings"]] == ["cuda-allocator-fragmentation"], log


def test_fragmentation_initiating_rank_in_interleaved_torchrun_log():
    finding = run_json(str(FRAG / "oom-current-torchrun-4ranks.log"))["findings"][0]
    assert finding["entry"] == "cuda-allocator-fragmentation"
    assert finding["initiating_rank"] == 2
    assert any("reserved by PyTorch but unallocated" in e["text"] for e in finding["evidence"])


@pytest.mark.parametrize(
    "log",
    [
        GC / "megatron-healthy.log",
        GC / "megatron-one-slow-checkpoint.log",
        GC / "plain-loop-noisy-2ranks",
        GC / "unrelated-importerror.log",
        FRAG / "oom-capacity-current.log",
        FRAG / "oom-capacity-legacy.log",
        FRAG / "healthy-training.log",
        FRAG / "unrelated-syntaxerror.log",
    ],
    ids=lambda p: p.name,
)
def test_seed_rules_silent_on_healthy_logs_and_unrelated_errors(log):
    seed = [
        "gc-straggler-step-time",
        "gc-straggler-probe-gc",
        "allocator-fragmentation-oom",
        "allocator-fragmentation-memory-summary",
        "allocator-fragmentation-drift",
    ]
    report = run_json(str(log), rules=seed)
    assert report["findings"] == []


# --- exit codes, formats, inputs ---------------------------------------------------------------


def test_exit_codes_and_missing_files(tmp_path):
    healthy = cli(
        "diagnose",
        str(FRAG / "healthy-training.log"),
        "--no-installed",
        "--rule",
        "allocator-fragmentation-oom",
    )
    assert healthy.returncode == 0 and b"No known failure found" in healthy.stdout
    found = cli("diagnose", str(FRAG / "oom-legacy-deepspeed.log"), "--no-installed")
    assert found.returncode == 1
    missing = cli("diagnose", str(tmp_path / "nope.log"), "--no-installed")
    assert missing.returncode == 2
    assert missing.stderr.decode().startswith("trainwreck: no such file or folder:")
    assert b"Traceback" not in missing.stderr
    no_glob = cli("diagnose", str(tmp_path / "*.log"), "--no-installed")
    assert no_glob.returncode == 2
    bad_rules = cli(
        "diagnose", str(FRAG / "healthy-training.log"), "--rules", str(tmp_path / "none.json")
    )
    assert bad_rules.returncode == 2 and b"Traceback" not in bad_rules.stderr
    usage = cli("diagnose")
    assert usage.returncode == 2


def test_text_and_markdown_formats():
    text = cli(
        "diagnose", str(FRAG / "oom-current-hf-trainer.log"), "--no-installed"
    ).stdout.decode()
    assert "1. " in text and "[cuda-allocator-fragmentation]" in text and "confidence" in text
    assert "evidence:" in text and "oom-current-hf-trainer.log:" in text
    assert "confirm:" in text and "fix:" in text and "verify:" in text
    assert "root cause:" not in text  # (the quick answer says it; --verbose adds it)
    assert "example.org" not in text  # `more:` links: tests/test_links.py
    markdown = cli(
        "diagnose",
        str(FRAG / "oom-current-hf-trainer.log"),
        "--no-installed",
        "--format",
        "markdown",
    ).stdout.decode()
    assert markdown.startswith("# Trainwreck diagnosis")
    assert "## 1. " in markdown and "**Evidence:**" in markdown and "**Confirm:**" in markdown


def test_folders_globs_gz_and_stdin(tmp_path):
    report = run_json(str(GC / "plain-loop-4ranks" / "rank*.log"))
    assert report["findings"][0]["entry"] == "python-gc-straggler"
    log = (FRAG / "oom-legacy-deepspeed.log").read_bytes()
    piped = cli("diagnose", "-", "--format", "json", "--no-installed", stdin=log)
    assert piped.returncode == 1
    assert json.loads(piped.stdout)["findings"][0]["evidence"][0]["file"] == "<stdin>"
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(log))
    assert run_json(str(packed))["findings"][0]["entry"] == "cuda-allocator-fragmentation"


def test_truncated_gzip_is_read_up_to_the_damage(tmp_path):
    lines = b"".join(b"ordinary line %d\n" % i for i in range(20000))
    oom = (FRAG / "oom-current-hf-trainer.log").read_bytes()
    packed = gzip.compress(oom + lines)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(packed[: len(packed) // 2])
    report = run_json(str(path))
    assert report["findings"][0]["entry"] == "cuda-allocator-fragmentation"
    assert any("truncated gzip" in s["reason"] for s in report["skipped"])


def test_binary_unreadable_and_odd_files_are_skipped_with_reasons(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "core.bin").write_bytes(bytes(range(256)) * 400)
    (folder / "empty.log").write_bytes(b"")
    (folder / "latin1.log").write_bytes(b"caf\xe9 \xff\xfe broken utf-8\n")
    (folder / "not-gzip.gz").write_bytes(b"\x1f\x8bthis is not gzip data at all")
    (folder / "job.log").write_bytes((FRAG / "oom-legacy-deepspeed.log").read_bytes())
    done = cli("diagnose", str(folder), "--format", "json", "--no-installed")
    assert done.returncode == 1, done.stderr
    assert b"Traceback" not in done.stderr
    report = json.loads(done.stdout)
    reasons = {Path(s["file"]).name: s["reason"] for s in report["skipped"]}
    assert "binary" in reasons["core.bin"]
    assert "gzip" in reasons["not-gzip.gz"]
    assert report["findings"][0]["entry"] == "cuda-allocator-fragmentation"


def test_a_10mb_line_and_junk_cannot_stall_diagnosis(tmp_path):
    path = tmp_path / "huge.log"
    with open(path, "wb") as out:
        out.write(b"start\n")
        out.write(b"x" * (10 << 20))  # one 10 MB line, no newline for a long time
        out.write(b"\n")
        out.write((FRAG / "oom-legacy-deepspeed.log").read_bytes())
        out.write(b"(" * 100_000 + b"\n")
        out.write(b"CUDA out of memory. Tried to allocate " + b"9" * 200_000 + b"\n")
    done = cli("diagnose", str(path), "--format", "json", "--no-installed", timeout=120)
    report = json.loads(done.stdout)
    assert report["findings"][0]["entry"] == "cuda-allocator-fragmentation"
    # The OOM after the giant line keeps its true line number.
    lines = [e["line"] for e in report["findings"][0]["evidence"]]
    assert 12 in lines
    assert any("cut" in s["reason"] for s in report["skipped"])


def test_pathological_regex_rule_runs_in_linear_time(tmp_path):
    """A catastrophic-backtracking pattern in a contributed rule cannot hang the engine (RE2)."""
    (tmp_path / "entries").mkdir()
    (tmp_path / "entries" / "evil.yaml").write_text("title: Evil\n")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "evil-rule.yaml").write_text(
        "id: evil-rule\nentry: evil\ntitle: t\ndescription: d\nconfidence: 0.5\n"
        "matchers:\n  evil:\n    regex: '^(x+x+)+y$'\n  nested:\n    regex: '(a|aa)+(b|bb)+c'\ncondition: evil or nested\n"
        "tests: {match: [a], clean: [b]}\n"
    )
    log = tmp_path / "x.log"
    log.write_bytes((b"x" * 60_000 + b"\n") * 20 + (b"a" * 60_000 + b"\n") * 20)
    done = cli(
        "diagnose",
        str(log),
        "--root",
        str(tmp_path),
        "--no-installed",
        "--format",
        "json",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["findings"] == []


def test_diagnose_imports_no_heavy_frameworks():
    probe = (
        "import sys\n"
        "from trainwreck.cli import main\n"
        f"code = main(['diagnose', {str(GC / 'probe-run')!r}, '--format', 'json', '--root', {str(ROOT)!r}])\n"
        "heavy = [m for m in ('torch', 'jupyter', 'jupyter_client', 'nbclient', 'nbformat', 'ipykernel', 'mkdocs', 'matplotlib') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert "HEAVY []" in done.stderr, done.stderr[-2000:]


# --- ranking, competing hypotheses, initiating rank ---------------------------------------


def _repo(root: Path, entries: dict[str, str], rules: dict[str, str]) -> Path:
    (root / "entries").mkdir(parents=True)
    (root / "rules").mkdir()
    for entry_id, related in entries.items():
        (root / "entries" / f"{entry_id}.yaml").write_text(
            f"id: {entry_id}\ntitle: {entry_id} title\nrelated: {related}\n"
        )
    for rule_id, body in rules.items():
        (root / "rules" / f"{rule_id}.yaml").write_text(
            f"id: {rule_id}\ntitle: {rule_id}\ndescription: d\n"
            + body
            + "tests: {match: [a], clean: [b]}\n"
        )
    return root


def test_initiating_failure_ranks_first_and_competing_hypotheses_explain_why(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "gpu-fault": "[{id: collective-timeout, relation: causes}]",
            "collective-timeout": "[{id: gpu-fault, relation: caused-by}]",
            "other-thing": "[]",
        },
        {
            "xid": "entry: gpu-fault\nconfidence: 0.5\nmatchers:\n  xid:\n    regex: 'NVRM: Xid \\(PCI:[^)]*\\): (?P<code>\\d+)'\ncondition: xid\n",
            "timeout": (
                "entry: collective-timeout\nconfidence: 0.9\nmatchers:\n  wd:\n    regex: 'Watchdog caught collective operation timeout'\n"
                "condition: wd\nreport: {initiating_rank: {missing_from: wd}}\n"
            ),
            "other": "entry: other-thing\nconfidence: 0.3\nmatchers:\n  o:\n    regex: 'something odd'\ncondition: o\n",
        },
    )
    log = tmp_path / "job.log"
    log.write_text(
        "[rank0]:[I1218 20:17:01.000000 100 train.py:1] step 10\n"
        "[rank1]:[I1218 20:17:01.000000 101 train.py:1] step 10\n"
        "[rank2]:[I1218 20:17:01.000000 102 train.py:1] step 10\n"
        "[rank3]:[I1218 20:17:01.000000 103 train.py:1] step 10\n"
        "[rank2]: something odd\n"
        "[rank2]: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        + "".join(
            f"[rank{r}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n"
            for r in (0, 1, 3)
        )
    )
    report = diagnose([str(log)], repo, use_installed=False)
    assert report.entries == ["gpu-fault", "collective-timeout", "other-thing"]
    first, second, third = report.findings
    assert first.confidence < second.confidence  # ranked first anyway: it causes the other
    assert any("gpu-fault causes collective-timeout" in c.why for c in first.competing)
    assert second.initiating_rank == 2  # the rank that never reported the timeout
    assert sorted(second.ranks) == [0, 1, 3]
    assert any("ranks lower: confidence 0.30" in c.why for c in second.competing)
    assert third.rank == 3


def test_rules_of_one_entry_merge_into_one_finding(tmp_path):
    repo = _repo(
        tmp_path,
        {"e": "[]"},
        {
            "r-one": "entry: e\nconfidence: 0.6\nmatchers:\n  a:\n    regex: 'alpha'\ncondition: a\n",
            "r-two": "entry: e\nconfidence: 0.5\nmatchers:\n  b:\n    regex: 'beta'\ncondition: b\n",
        },
    )
    log = tmp_path / "x.log"
    log.write_text("alpha\nbeta\n")
    report = diagnose([str(log)], repo, use_installed=False)
    assert len(report.findings) == 1
    finding = report.findings[0]
    assert finding.rules == ("r-one", "r-two") and finding.rule == "r-one"
    assert finding.confidence == pytest.approx(0.8)  # 1 - 0.4 * 0.5
    assert [e.line for e in finding.evidence] == [1, 2]


def test_rules_option_accepts_a_bundle_or_a_folder(tmp_path):
    assert main(
        [
            "compile",
            "--root",
            str(ROOT),
            "--no-wheel",
            "--no-tests",
            "--bundle",
            str(tmp_path / "b.json"),
        ]
    ) in (0, 1)
    if (tmp_path / "b.json").exists():
        report = diagnose(
            [str(FRAG / "oom-legacy-deepspeed.log")], rules=[str(tmp_path / "b.json")]
        )
        assert report.entries == ["cuda-allocator-fragmentation"]
    report = diagnose([str(FRAG / "oom-legacy-deepspeed.log")], rules=[str(ROOT / "rules")])
    assert "cuda-allocator-fragmentation" in report.entries


def test_checkout_bundle_is_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINWRECK_CACHE_DIR", raising=False)  # this test reads ROOT/build
    repo = _repo(
        tmp_path,
        {"e": "[]"},
        {"r-one": "entry: e\nconfidence: 0.6\nmatchers:\n  a:\n    regex: 'alpha'\ncondition: a\n"},
    )
    log = tmp_path / "x.log"
    log.write_text("alpha\n")
    assert diagnose([str(log)], repo, use_installed=False).entries == ["e"]
    cached = list((repo / "build" / "rules-cache").glob("*.json"))
    assert len(cached) == 1
    (repo / "rules" / "r-one.yaml").write_text(
        (repo / "rules" / "r-one.yaml").read_text().replace("alpha", "gamma")
    )
    assert diagnose([str(log)], repo, use_installed=False).entries == []
    assert list((repo / "build" / "rules-cache").glob("*.json")) != cached


def test_broken_rule_in_checkout_is_skipped_with_a_warning(tmp_path):
    repo = _repo(
        tmp_path,
        {"e": "[]"},
        {
            "good": "entry: e\nconfidence: 0.6\nmatchers:\n  a:\n    regex: 'alpha'\ncondition: a\n",
            "bad": "entry: e\nconfidence: 0.6\nmatchers:\n  a:\n    regex: 'alpha'\ncondition: a and stalz\n",
        },
    )
    log = tmp_path / "x.log"
    log.write_text("alpha\n")
    report = diagnose([str(log)], repo, use_installed=False)
    assert report.entries == ["e"]
    assert any("rules/bad.yaml" in w and "unknown name 'stalz'" in w for w in report.warnings)


def test_no_rules_is_a_usage_error(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("x\n")
    done = cli("diagnose", str(log), "--root", str(tmp_path), "--no-installed", cwd=tmp_path)
    assert done.returncode == 2 and b"no rules" in done.stderr


def test_json_output_is_stable_and_strict():
    report = run_json(str(GC / "probe-run"))
    assert set(report) == {"findings", "suggestions", "skipped", "stats"}
    # Strict JSON: no NaN or Infinity anywhere.
    text = cli(
        "diagnose", str(GC / "probe-run"), "--format", "json", "--no-installed"
    ).stdout.decode()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text)


def test_a_malformed_rule_in_a_bundle_is_skipped_not_fatal(tmp_path):
    import shutil

    from trainwreck.compile.packs import compile_folder

    bundle, _ = compile_folder(ROOT, cache=False)
    data = dict(bundle.data)
    rules = [dict(r) for r in data["rules"]]
    rules.append({"id": "broken-pack-rule", "entry": "x", "matchers": {"m": {"kind": "regex"}}})
    data["rules"] = rules
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(data))
    done = cli(
        "diagnose", str(FRAG / "oom-legacy-deepspeed.log"), "--rules", str(path), "--format", "json"
    )
    assert done.returncode == 1, done.stderr
    assert b"Traceback" not in done.stderr
    assert b"broken-pack-rule" in done.stderr
    assert json.loads(done.stdout)["findings"][0]["entry"] == "cuda-allocator-fragmentation"
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize(
    "folder",
    [
        GC / "plain-loop-4ranks",
        GC / "probe-run",
        FRAG / "probe-drift-4ranks",
        FRAG / "text-drift-4ranks",
    ],
    ids=lambda p: p.name,
)
def test_parallel_scan_of_several_files_equals_serial(folder):
    serial = diagnose([str(folder)], ROOT, use_installed=False, jobs=1)
    parallel = diagnose([str(folder)], ROOT, use_installed=False, jobs=2)
    assert serial.findings and parallel.findings == serial.findings
    assert parallel.skipped == serial.skipped
    assert parallel.stats.lines == serial.stats.lines


def test_jobs_option_on_the_command_line():
    serial = cli(
        "diagnose",
        str(GC / "plain-loop-4ranks"),
        "--format",
        "json",
        "--no-installed",
        "--jobs",
        "1",
    )
    parallel = cli(
        "diagnose",
        str(GC / "plain-loop-4ranks"),
        "--format",
        "json",
        "--no-installed",
        "--jobs",
        "2",
    )
    assert serial.returncode == parallel.returncode == 1, parallel.stderr
    assert json.loads(serial.stdout)["findings"] == json.loads(parallel.stdout)["findings"]


def test_control_characters_in_evidence_are_shown_not_replayed(tmp_path):
    # A log can carry NULs and ANSI escapes; printed evidence must not drive the terminal.
    log = tmp_path / "oom.log"
    log.write_bytes(
        b"\x1b[31m[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
        b" GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Including non-PyTorch"
        b" memory, this process has 77.58 GiB memory in use. Of the allocated memory 60.02 GiB is"
        b" allocated by PyTorch, and 16.80 GiB is reserved by PyTorch but unallocated. If reserved"
        b" but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments"
        b":True to avoid fragmentation.\x00\x1b[0m\n"
    )
    done = cli("diagnose", str(log), "--no-installed")
    assert done.returncode == 1, done.stderr.decode()
    assert b"\x1b" not in done.stdout and b"\x00" not in done.stdout
    # The paste-shape layer removes ANSI colour before matching (and so from the evidence).
    assert b"oom.log:1: [rank0]: torch.OutOfMemoryError" in done.stdout
