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
    assert report.entries == ["python-gc-straggler"]
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
