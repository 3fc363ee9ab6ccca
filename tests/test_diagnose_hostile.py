"""`trainwreck diagnose` on hostile logs (issue 10): a bad value skips that value, never the run;
damaged, special, unreadable or oddly framed inputs are read as far as they can be and the report
says what was not. A crash never exits with the findings code 1."""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.test_compile_cli import make_repo
from trainwreck import diagnose as dg
from trainwreck import engine as eng
from trainwreck import formats
from trainwreck.cli import main
from trainwreck.compile.packs import RuleSet, resolve
from trainwreck.engine import reading, state

REPO = Path(__file__).resolve().parents[1]
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 19.68 GiB. GPU 0 has a total "
    "capacity of 23.68 GiB of which 11.88 GiB is free. Including non-PyTorch memory, this process "
    "has 11.79 GiB memory in use. Of the allocated memory 11.44 GiB is allocated by PyTorch, and "
    "43.59 MiB is reserved by PyTorch but unallocated."
)
HUGE = "9" * 400
HUGER = "9" * 5000  # beyond Python's int/str conversion limit


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return resolve(REPO, None, use_installed=False)


def cli(*args: str) -> int:
    return main(["diagnose", "--root", str(REPO), "--no-installed", *args])


def oom_log(folder: Path, name: str = "rank3.log") -> Path:
    path = folder / name
    path.write_text(f"[rank3]: {OOM}\n")
    return path


@pytest.mark.parametrize(
    "line",
    [
        f'{{"v":1,"t":1.0,"rank":0,"event":"step","step":1,"duration_ms":{HUGE},"gc_ms":0}}',
        f'{{"v":1,"t":{HUGE},"rank":0,"event":"step","step":1,"duration_ms":1.0,"gc_ms":0}}',
        f'{{"v":1,"t":1.0,"rank":0,"event":"step","step":{HUGE},"duration_ms":1.0,"gc_ms":0}}',
        f'{{"v":1,"t":1.0,"rank":{HUGE},"event":"step","step":1,"duration_ms":1.0,"gc_ms":0}}',
        f"[rank{HUGER}]: {OOM}",
        f"rank={HUGER} {OOM}",
        f"[rank{HUGE}]: iteration 5/ 100 | elapsed time per iteration (ms): {HUGE}.5",
        f"[rank1]: step {HUGER} | step_time {HUGE} ms",
    ],
    ids=["duration_ms", "t", "step", "json-rank", "rank-prefix", "rank=", "megatron", "plain"],
)
def test_an_oversized_number_skips_the_value_not_the_run(
    tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text((line + "\n") * 40)
    oom_log(tmp_path)
    code = cli("--format", "json", str(bad), str(tmp_path / "rank3.log"))
    out = capsys.readouterr()
    assert code == 1, out.err
    report = json.loads(out.out)
    assert "cuda-oom-capacity" in [f["entry"] for f in report["findings"]]
    assert report["stats"]["files"] == 2


def test_a_crash_never_exits_with_the_findings_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(dg, "build_findings", broken)
    code = cli(str(oom_log(tmp_path)))
    err = capsys.readouterr().err
    assert code == dg.EXIT_INTERNAL_ERROR not in (0, 1, 2, dg.EXIT_NOTHING_READ)
    assert "Traceback" not in err
    assert err.startswith("trainwreck: internal error") and "RuntimeError" in err


def _gzip_lines(n: int) -> tuple[bytes, list[str]]:
    lines = [f"[rank0]: iteration {i}/ 100 | plain log line number {i}" for i in range(n)]
    lines[-1] = f"[rank3]: {OOM}"
    return gzip.compress(("\n".join(lines) + "\n").encode()), lines


@pytest.mark.parametrize("damage", ["trailing-garbage", "crc", "truncated"])
def test_damaged_gzip_keeps_every_byte_decoded_before_the_damage(
    tmp_path: Path, rules: RuleSet, damage: str
) -> None:
    data, lines = _gzip_lines(20_000)
    if damage == "trailing-garbage":
        data += b"this is not gzip data" * 10
    elif damage == "crc":
        crc, size = struct.unpack("<II", data[-8:])
        data = data[:-8] + struct.pack("<II", crc ^ 0xFFFF, size)
    else:
        data = data[:-4]  # ISIZE gone: every deflate byte is intact
    path = tmp_path / "rank3.log.gz"
    path.write_bytes(data)
    report = dg.diagnose([str(path)], rule_set=rules)
    assert report.stats.lines == len(lines)
    assert "cuda-oom-capacity" in report.entries
    reasons = " ".join(s.reason for s in report.skipped)
    expected = {"trailing-garbage": "trailing garbage", "crc": "CRC", "truncated": "truncated"}
    assert expected[damage] in reasons, report.skipped


def test_concatenated_gzip_members_are_all_read(tmp_path: Path, rules: RuleSet) -> None:
    path = tmp_path / "rank3.log.gz"
    path.write_bytes(gzip.compress(b"first member\n") + gzip.compress(f"[rank3]: {OOM}\n".encode()))
    report = dg.diagnose([str(path)], rule_set=rules)
    assert report.stats.lines == 2 and report.skipped == []
    assert "cuda-oom-capacity" in report.entries


def test_a_pipe_is_read_as_a_stream(tmp_path: Path, rules: RuleSet) -> None:
    # what `trainwreck diagnose <(cat x.log)` passes: /dev/fd/N, a pipe that cannot seek
    read_end, write_end = os.pipe()
    os.write(write_end, f"[rank3]: {OOM}\n".encode())
    os.close(write_end)
    try:
        report = dg.diagnose([f"/dev/fd/{read_end}"], rule_set=rules)
    finally:
        os.close(read_end)
    assert "cuda-oom-capacity" in report.entries
    assert report.skipped == []


def test_a_gzip_pipe_is_read_as_a_stream(tmp_path: Path, rules: RuleSet) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def writer() -> None:
        with open(fifo, "wb") as handle:
            handle.write(gzip.compress(f"[rank3]: {OOM}\n".encode()))

    thread = threading.Thread(target=writer)
    thread.start()
    report = dg.diagnose([str(fifo)], rule_set=rules)
    thread.join(10)
    assert "cuda-oom-capacity" in report.entries


def test_special_files_in_a_folder_are_skipped_with_a_message(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    oom_log(logs)
    os.mkfifo(logs / "no-writer.log")  # opening it would wait for a writer forever
    result = subprocess.run(
        [sys.executable, "-m", "trainwreck", "diagnose", "--root", str(REPO), "--no-installed",
         "--format", "json", str(logs)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert [f["entry"] for f in report["findings"]] == ["cuda-oom-capacity"]
    assert {
        "file": str(logs / "no-writer.log"),
        "reason": "not a regular file (a FIFO); skipped",
    } in report["skipped"]


def test_lone_carriage_returns_end_lines(tmp_path: Path, rules: RuleSet) -> None:
    bar = "".join(f"epoch 1: {i:3d}%|{'#' * (i // 5):20s}| {i}/100\r" for i in range(100)) * 40
    assert len(bar) > reading.MAX_LINE  # one 'line' on main: cut at 64 KiB before the OOM
    path = tmp_path / "rank3.log"
    path.write_bytes((bar + f"[rank3]: {OOM}\rmore progress\r\n").encode())
    report = dg.diagnose([str(path)], rule_set=rules)
    assert "cuda-oom-capacity" in report.entries
    evidence = report.findings[0].evidence[0]
    assert evidence.line == 4001
    assert evidence.text.startswith("[rank3]: torch.OutOfMemoryError")
    assert report.stats.lines == 4002
    assert report.skipped == []


def test_crlf_line_ends_still_count_once(tmp_path: Path, rules: RuleSet) -> None:
    path = tmp_path / "rank3.log"
    path.write_bytes(b"a\r\nb\r\n" + f"[rank3]: {OOM}\r\n".encode())
    report = dg.diagnose([str(path)], rule_set=rules)
    assert report.stats.lines == 3
    assert report.findings[0].evidence[0].line == 3


def test_distinct_ranks_are_capped_and_the_cap_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the real cap is 32,768 ranks (benchmarks/bench_hostile.py measures 10^6 of them); a lower
    # one keeps this test fast
    monkeypatch.setattr(state, "MAX_RANKS", 1000)
    demo = resolve(make_repo(tmp_path / "repo"), None, use_installed=False)  # one rule: fast
    path = tmp_path / "many.log"
    with open(path, "w") as handle:
        for rank in range(5000):
            handle.write(f"[rank{rank}]: DemoError: widget exploded after 2 s\n")
    report = dg.diagnose([str(path)], rule_set=demo)
    assert report.entries == ["demo-failure"]
    assert list(report.findings[0].ranks) == list(range(1000))
    capped = [s.to_json() for s in report.skipped if "distinct ranks" in s.reason]
    assert capped == [
        {
            "file": str(path),
            "reason": "more than 1,000 distinct ranks; lines of further ranks "
            "were read with their rank unknown",
        }
    ]


def test_an_unreadable_file_alone_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = oom_log(tmp_path)
    real_open = open

    def denied(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(reading, "open", denied, raising=False)
    code = cli(str(path))
    out = capsys.readouterr()
    assert code == dg.EXIT_NOTHING_READ == 3
    assert "No known failure found" not in out.out
    assert f"{path}: unreadable: Permission denied" in out.out
    assert "trainwreck: no input could be read" in out.err


def test_an_unreadable_subfolder_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    (logs / "locked").mkdir(parents=True)
    oom_log(logs)
    real_scandir = os.scandir

    def scandir(path: object = ".") -> object:
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    code = cli("--format", "json", str(logs))
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {
        "file": str(logs / "locked"),
        "reason": "unreadable folder: Permission denied",
    } in report["skipped"]


def test_a_symlink_loop_in_a_folder_is_unreadable_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    os.symlink(logs / "loop.log", logs / "loop.log")
    code = cli(str(logs))
    out = capsys.readouterr()
    assert code == dg.EXIT_NOTHING_READ
    assert "loop.log: unreadable: Too many levels of symbolic links" in out.out


def test_control_characters_in_file_names_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = oom_log(tmp_path, "rank3\x1b[2J\nfake.log")
    for fmt in ("text", "markdown"):
        assert cli("--format", fmt, str(path)) == 1
        out = capsys.readouterr().out
        assert "\x1b" not in out
        assert "rank3\\x1b[2J\\x0afake.log" in out


def test_exit_codes_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert dg.EXIT_CODES_HELP in help_text
    readme = " ".join((REPO / "README.md").read_text().split())
    assert dg.EXIT_CODES_HELP in readme


def test_detector_evidence_read_back_stops_at_a_lone_cr(tmp_path: Path, rules: RuleSet) -> None:
    source = REPO / "tests" / "logs" / "python-gc-straggler" / "plain-loop-4ranks"
    for log in source.iterdir():
        (tmp_path / log.name).write_bytes(log.read_bytes().replace(b"\n", b"\r"))
    report = dg.diagnose([str(tmp_path)], rule_set=rules)
    # (the logs also print torch's lr_scheduler-before-optimizer warning among their noise lines)
    assert report.entries[0] == "python-gc-straggler"
    assert set(report.entries) <= {"python-gc-straggler", "lr-scheduler-before-optimizer-step"}
    texts = [item.text for item in report.findings[0].evidence]
    assert texts and all("\\x0d" not in text and "step_time=" in text for text in texts), texts


# --- issue 34: hostile inputs, second round -------------------------------------------------


@pytest.mark.parametrize("jobs", ["0", "-5"])
def test_jobs_below_one_is_a_usage_error(
    tmp_path: Path, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--jobs", jobs, str(oom_log(tmp_path))) == dg.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--jobs {jobs}" in err and "1 or more" in err and "Traceback" not in err


def test_jobs_are_capped_at_the_usable_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --jobs 3000 on 3,000 small files forked 1,558 processes on 2 cores before the cap.
    from trainwreck.engine import parallel

    monkeypatch.setattr(parallel, "usable_cpus", lambda: 2)
    inputs = [(f"{i}.log", str(oom_log(tmp_path, f"{i}.log"))) for i in range(10)]
    assert parallel.workers(inputs, 3000) == 2
    assert parallel.workers(inputs, 2) == 2
    assert parallel.workers(inputs, 1) == 1
    assert cli("--jobs", "3000", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "--jobs 3000" in err and "2 CPUs" in err and "using 2 processes" in err


def test_many_small_files_go_to_the_workers_in_batches(
    tmp_path: Path, rules: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task per small file costs more in fresh rule state and pickling than its scan (--jobs 64
    was 4x slower than serial on 3,000 one-line files): consecutive files share a task, and the
    result is the serial one."""
    from tests.test_diagnose_bulk import state_of
    from trainwreck.engine import parallel

    monkeypatch.setattr(parallel, "usable_cpus", lambda: 2)
    logs = (REPO / "tests" / "logs").rglob("*")
    sources = sorted(p for p in logs if p.is_file() and p.stat().st_size < 200_000)[:40]
    for index, source in enumerate(sources):
        (tmp_path / f"{index:03d}-{source.name}").write_bytes(source.read_bytes())
    for index in range(200):
        (tmp_path / f"z{index:03d}.log").write_text(f"step {index} | loss 1.0\n")
    inputs = [(str(p), str(p)) for p in sorted(tmp_path.iterdir())]
    tasks: list[int] = []
    original = parallel.plan_tasks

    def counted(*args: Any) -> Any:
        planned = original(*args)
        tasks.extend(len(task) for task, _ in planned)
        return planned

    monkeypatch.setattr(parallel, "plan_tasks", counted)
    engine = eng.Engine(rules.rules)
    parallel_state = state_of(engine.scan(inputs, jobs=2))
    serial_state = state_of(eng.Engine(rules.rules).scan(inputs, jobs=1))
    assert sum(tasks) == len(inputs) and len(tasks) <= 4 * 2, tasks
    assert parallel_state == serial_state


def _outside_code(markdown: str) -> str:
    """The Markdown with its inline code spans removed (what GitHub would read as Markdown)."""
    import re

    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown)


SUGGESTED = (  # (few extra words: the suggestion's similarity stays above its threshold)
    "Error: DataLoader workers' memory grows every epoch: copy-on-read of Python objects shared "
    "by fork <img src=x onerror=alert(1)> [c](https://e.x) ![i](/p.png) "
    "\x1b[2J\x1b]0;t\x07\u009b31m\u202e"
)


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_suggestions_cannot_forge_report_lines_or_markup(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Audit 1.19/1.20: a file name with newlines and a log line with HTML, links and ESC went
    raw into the suggestions (and from the Markdown into the action's job summary)."""
    logs = tmp_path / "s"
    logs.mkdir()
    (logs / "n\n# INJECTED\n<img src=x onerror=alert(1)>\n.log").write_text(SUGGESTED + "\n")
    assert cli("--format", fmt, str(logs)) == 0
    out = capsys.readouterr().out
    assert "Suggestions" in out and "INJECTED" in out  # shown, as text
    for raw in ("\x1b", "\x07", "\u009b", "\u202e"):
        assert raw not in out
    lines = out.splitlines()
    assert not any(line.lstrip().startswith(("# INJECTED", "<img", ".log")) for line in lines)
    if fmt == "markdown":
        prose = _outside_code(out)
        assert "<" not in prose and "](" not in prose, prose
        headings = [line for line in prose.splitlines() if line.startswith("#")]
        assert headings == ["# Trainwreck diagnosis"]


def test_a_rule_pack_cannot_put_markup_in_the_markdown_report(
    tmp_path: Path, rules: RuleSet
) -> None:
    """Entry text from an installed rule pack reaches the job summary too: escaped as text."""
    import copy

    hostile = copy.deepcopy(rules)
    entry = hostile.entries["cuda-oom-capacity"]
    entry["title"] = "Title <img src=https://evil.example/t.png>\n# FAKE"
    entry["root_cause"] = "[click](https://evil.example) <details open>"
    entry["fix"] = {"title": "**APPROVED**\n## fake", "steps": ["<script>x</script>\n# step"]}
    entry["verify"] = ["![v](https://evil.example/v.png)"]
    report = dg.diagnose([str(oom_log(tmp_path))], rule_set=hostile)
    assert "cuda-oom-capacity" in report.entries
    prose = _outside_code(formats.render(report, "markdown"))
    assert "<" not in prose and "](" not in prose and "**APPROVED**" not in prose, prose
    assert not any(
        line.lstrip().startswith(("# FAKE", "## fake", "# step")) for line in prose.splitlines()
    )
    text = formats.render(report, "text")
    assert (
        "\n# FAKE" not in text and "Title <img src=https://evil.example/t.png>\\x0a# FAKE" in text
    )


def test_bidi_and_c1_controls_are_escaped_in_names_and_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Audit 1.18: U+202E made 'd\\u202etxt.gol' show as 'dlog.txt'; U+009B (a CSI) in an
    evidence line reached the terminal raw."""
    path = tmp_path / "rank3-d\u202etxt.gol"
    path.write_text(f"[rank3]: \u009b2J\u202e\u2066 {OOM}\n")
    for fmt in ("text", "markdown"):
        assert cli("--format", fmt, str(path)) == 1
        out = capsys.readouterr().out
        assert not any(c in out for c in "\u202e\u2066\u009b"), fmt
        assert "rank3-d\\u202etxt.gol" in out
        assert "\\x9b2J\\u202e\\u2066" in out


@pytest.mark.parametrize(
    "value",
    ["plain", "a\nb\r\x1b[2J\x00\x7f", "\u009b\u009d\u202e\u2066\u200f", "x|`<img src=y>`", "``",
     " lead and trail ", "", "[l](https://e.x) **b** # h <b>&amp;", "tab\there"],
)  # fmt: skip
def test_report_text_is_one_line_inert_and_idempotent(value: str) -> None:
    from trainwreck.sanitize import report_text

    for form in ("text", "markdown", "code"):
        shown = report_text(value, form)
        assert "\n" not in shown and "\r" not in shown
        assert not any((ord(c) < 0x20 and c != "\t") or 0x7F <= ord(c) < 0xA0 for c in shown)
        assert not any(c in shown for c in "\u202e\u2066\u200f")
    text = report_text(value)
    assert report_text(text) == text
    code = report_text(value, "code")
    assert _outside_code(code) == "", code  # one code span, nothing outside it
    assert code.strip("`").strip(" ").replace("\\|", "|") == text.strip(" ") or not text.strip()
    prose = report_text(value, "markdown")
    assert "<" not in prose and "](" not in prose and "**" not in prose


CRASHED = REPO / "tests" / "logs" / "crashed-node"


@pytest.mark.parametrize("name", ["nul-tail.log", "torn-last-line.log"])
def test_a_crashed_nodes_log_is_read_around_its_nul_tail(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Audit 1.10: a log ending in the zero-filled block a crashed node leaves was skipped whole
    as binary (exit 0), missing its NaN loss and its illegal memory access."""
    log = CRASHED / name
    assert cli("--format", "json", str(log)) == dg.EXIT_FINDINGS
    report = json.loads(capsys.readouterr().out)
    assert {"nan-loss", "cuda-illegal-memory-access"} <= {f["entry"] for f in report["findings"]}
    text_end = log.read_bytes().index(b"\x00")
    nul = len(log.read_bytes()) - text_end
    assert report["skipped"] == [
        {
            "file": str(log),
            "reason": f"{nul:,} NUL bytes in 1 run were skipped (the first at byte {text_end:,}):"
            " a zero-filled region, as a crash or power loss leaves",
        }
    ]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_powershell_log_is_diagnosed(
    tmp_path: Path, encoding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Audit 1.5: UTF-16 LE with a BOM (PowerShell 5's `>`) was skipped as binary, exit 0."""
    log = tmp_path / "rank3.log"
    log.write_bytes(f"step 1 ok\r\n[rank3]: {OOM}\r\n".encode(encoding))
    assert cli("--format", "json", str(log)) == dg.EXIT_FINDINGS
    report = json.loads(capsys.readouterr().out)
    assert "cuda-oom-capacity" in [f["entry"] for f in report["findings"]]
    assert report["skipped"] == []
    evidence = report["findings"][0]["evidence"][0]
    assert evidence["line"] == 2 and evidence["text"].startswith("[rank3]: torch.OutOfMemoryError")


def test_a_fifo_named_with_no_writer_ends_with_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reading, "SPECIAL_WAIT_S", 0.5)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert cli(str(fifo)) == dg.EXIT_NOTHING_READ
    assert "no data after 0.5 s" in capsys.readouterr().out
