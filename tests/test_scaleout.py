"""Scale-out gives the serial answer: a scan on Dask, and saved partial states merged, find what
one serial scan of the same logs finds (same entries, order, initiating rank, evidence lines).

The job: per-rank logs in which one rank's DataLoader worker is killed and every other rank
then reports the NCCL watchdog timeout (trainwreck.scaleout.synthetic).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainwreck import formats
from trainwreck.cli import main
from trainwreck.compile.packs import RuleSet, resolve
from trainwreck.diagnose import diagnose
from trainwreck.engine import parallel, partial
from trainwreck.inputs import expand_inputs
from trainwreck.scaleout.command import MergeScanner, PartialScanner
from trainwreck.scaleout.synthetic import failing_rank, write_job

ROOT = Path(__file__).resolve().parents[1]
RANKS = 256

pytest.importorskip("distributed", reason="the dask extra is not installed")


@pytest.fixture(scope="module")
def rule_set() -> RuleSet:
    return resolve(ROOT, None, use_installed=False)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    write_job(folder, RANKS, steps=60)
    return folder


def report_json(report: Any) -> dict[str, Any]:
    data = json.loads(formats.render(report, "json"))
    data["stats"].pop("seconds")
    data["stats"].pop("rule_sources")
    return data


def dask_scanner(**options: Any) -> Any:
    from trainwreck.scaleout.cluster import DaskScanner

    return DaskScanner(workers=2, processes=False, **options)


def save_partials(files: list[str], rule_set: RuleSet, folder: Path, pieces: int) -> list[str]:
    """Partial states of consecutive slices of `files` (in input order)."""
    states = []
    step = -(-len(files) // pieces)
    for index in range(pieces):
        out = str(folder / f"part{index}{partial.SUFFIX}")
        diagnose(
            files[index * step : (index + 1) * step],
            ROOT,
            rule_set=rule_set,
            jobs=1,
            scanner=PartialScanner(out, jobs=1),
        )
        states.append(out)
    return states


def test_serial_dask_and_merged_partials_find_the_same(job, rule_set, tmp_path):
    serial = report_json(diagnose([str(job)], ROOT, rule_set=rule_set, jobs=1))
    failing = failing_rank(RANKS)
    entries = [finding["entry"] for finding in serial["findings"]]
    assert entries[:2] == ["dataloader-worker-killed", "nccl-collective-timeout"]
    assert all(f["initiating_rank"] == failing for f in serial["findings"][:2])
    timeout = serial["findings"][1]
    assert len(timeout["ranks"]) == RANKS - 1 and failing not in timeout["ranks"]

    on_dask = report_json(diagnose([str(job)], ROOT, rule_set=rule_set, scanner=dask_scanner()))
    assert on_dask == serial

    files = [display for display, _ in expand_inputs([str(job)])[0]]
    states = save_partials(files, rule_set, tmp_path, pieces=3)
    merged = report_json(diagnose(states, ROOT, rule_set=rule_set, scanner=MergeScanner()))
    assert merged == serial


def test_merge_is_associative(job, rule_set, tmp_path):
    """(a + b) + c and a + (b + c) leave the same saved state."""
    from trainwreck.engine.scanning import Engine

    files = [display for display, _ in expand_inputs([str(job)])[0]][:40]
    a, b, c = (partial.read(s) for s in save_partials(files, rule_set, tmp_path, pieces=3))
    engine = Engine(rule_set.rules)
    digest = a.digest

    def merged(*states: partial.SavedState) -> partial.SavedState:
        done = partial.merge_saved(states, engine, digest)
        return partial.load(partial.dump(done.result, digest, done.ranges), "merged")

    left = merged(merged(a, b), c)
    right = merged(a, merged(b, c))
    assert left.doc == right.doc
    assert np.array_equal(left.rows, right.rows, equal_nan=True)
    assert left.files == files


def test_a_file_cut_into_byte_ranges_on_dask_finds_what_serial_finds(
    job, rule_set, tmp_path, monkeypatch
):
    """One log larger than the split size (and than a few read blocks) is scanned in parts on
    two workers."""
    big = tmp_path / "all-ranks.log"
    with big.open("w") as out:
        for path in write_job(tmp_path / "ranks", 32, steps=4000):
            out.write(path.read_text())
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", big.stat().st_size // 3)
    from trainwreck.engine.scanning import Engine

    engine = Engine(rule_set.rules)
    planned = parallel.plan_tasks(engine, [(str(big), str(big))], 2)
    assert len(planned) == 2 and all(task[0][3] is not None for task, _ in planned)
    serial = report_json(diagnose([str(big)], ROOT, rule_set=rule_set, jobs=1))
    on_dask = report_json(diagnose([str(big)], ROOT, rule_set=rule_set, scanner=dask_scanner()))
    assert serial["findings"] and on_dask == serial


def test_a_file_that_cannot_be_read_is_reported_skipped_on_dask(job, rule_set):
    from trainwreck.engine.scanning import Engine

    engine = Engine(rule_set.rules)
    inputs = [("rank0.log", str(job / "rank0.log")), ("gone.log", str(job / "no-such.log"))]
    result, _ = dask_scanner().scan(engine, rule_set.rules, inputs)
    assert result.files == ["rank0.log", "gone.log"]
    assert [s.file for s in result.skipped] == ["gone.log"]
    assert result.lines > 0


def test_a_failed_task_is_retried(job, rule_set, monkeypatch, tmp_path):
    from trainwreck.scaleout import cluster

    scan_task = cluster.scan_task
    tries = tmp_path / "tries"  # (a file: Dask may run a copy of the function)
    tries.mkdir()

    def flaky(digest: str, task: Any, budget: int) -> bytes:
        mark = tries / Path(task[0][1]).name
        with mark.open("a") as out:
            out.write("x")
        if mark.read_text() == "x":
            raise OSError("the first try fails")
        return scan_task(digest, task, budget)

    def tried() -> list[int]:
        return [len(mark.read_text()) for mark in tries.iterdir()]

    monkeypatch.setattr(cluster, "scan_task", flaky)
    from trainwreck.engine.scanning import Engine

    inputs = [(f"rank{r}.log", str(job / f"rank{r}.log")) for r in range(8)]
    result, _ = dask_scanner().scan(Engine(rule_set.rules), rule_set.rules, inputs)
    assert not result.skipped and len(result.files) == 8
    assert tried() and set(tried()) == {2}

    for mark in tries.iterdir():
        mark.unlink()
    result, _ = dask_scanner(retries=0).scan(Engine(rule_set.rules), rule_set.rules, inputs)
    assert len(result.files) == 8 and {s.file for s in result.skipped} == {n for n, _ in inputs}


def _rewritten(path: Path, change: dict[str, Any]) -> None:
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read(partial.STATE_MEMBER))
        rows = archive.read(partial.SERIES_MEMBER)
    doc.update(change)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(partial.STATE_MEMBER, json.dumps(doc))
        archive.writestr(partial.SERIES_MEMBER, rows)
    path.write_bytes(out.getvalue())


def test_merge_refuses_other_rules_versions_and_non_states(job, tmp_path, capsys):
    log = str(job / "rank0.log")
    state = tmp_path / "one.state"
    args = ["--root", str(ROOT)]
    assert main(["diagnose", log, "--no-installed", "--partial", str(state), *args]) == 0
    assert main(["merge", str(state), "--no-installed", "--format", "json", *args]) == 1
    capsys.readouterr()

    # written with every rule, merged with one: another rules digest
    code = main(
        ["merge", str(state), "--no-installed", "--rule", "nccl-collective-timeout-hang", *args]
    )
    err = capsys.readouterr().err
    assert code == 2 and "scanned with other rules" in err and len(err.splitlines()) == 1

    _rewritten(state, {"version": 99})
    assert main(["merge", str(state), "--no-installed", *args]) == 2
    err = capsys.readouterr().err
    assert "version 99 is not supported" in err and len(err.splitlines()) == 1

    _rewritten(state, {"version": partial.VERSION, "files": "not a list", "rules": [{"id": 1}]})
    assert main(["merge", str(state), "--no-installed", *args]) == 2
    err = capsys.readouterr().err
    assert "damaged scan state" in err and str(state) in err and len(err.splitlines()) == 1

    state.write_text("not a zip")
    assert main(["merge", str(state), "--no-installed", *args]) == 2
    err = capsys.readouterr().err
    assert "not a trainwreck scan state" in err and len(err.splitlines()) == 1


def test_the_state_file_holds_no_pickle(job, rule_set, tmp_path):
    [state] = save_partials([str(job / "rank3.log")], rule_set, tmp_path, pieces=1)
    with zipfile.ZipFile(state) as archive:
        assert sorted(archive.namelist()) == [partial.SERIES_MEMBER, partial.STATE_MEMBER]
        doc = json.loads(archive.read(partial.STATE_MEMBER))
    assert doc["format"] == partial.FORMAT and doc["version"] == partial.VERSION
    assert doc["files"] == [{"name": str(job / "rank3.log"), "range": None}]
    assert partial.read(state).rows.shape[1] == 7


def test_diagnose_imports_no_dask_until_asked():
    """The core install runs without the dask extra: only --dask imports it."""
    import subprocess
    import sys

    code = (
        "import argparse, sys\n"
        "from trainwreck import diagnose\n"
        "from trainwreck.scaleout import command\n"
        "parser = argparse.ArgumentParser(); diagnose.configure_parser(parser)\n"
        "command.scanner_of(parser.parse_args(['x.log', '--partial', 'x.state']))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_a_big_job_is_reported_by_groups_of_ranks_and_tails_first(job, capsys):
    failing = failing_rank(RANKS)
    code = main(
        ["diagnose", str(job), "--no-installed", "--tail-first", "0.01", "--root", str(ROOT)]
    )
    out = capsys.readouterr().out
    assert code == 1
    quick, full = out.split("\n\n2 finding(s) in 256 file(s)", 1)
    summary = (
        f"{RANKS - 1} ranks report Collective timeout: Watchdog caught collective operation "
        f"timeout (a rank never joined); rank {failing} failed first with DataLoader worker"
    )
    assert quick.startswith(f"Quick verdict from the last 0.01 MB of {RANKS} log(s);")
    assert summary in quick and summary in full.splitlines()[1]
    assert f"ranks: {RANKS - 1} ranks: 0-{failing - 1}, {failing + 1}-{RANKS - 1}; " in full


def test_rank_ranges_name_runs_of_consecutive_ranks():
    from trainwreck.formats import rank_ranges

    assert rank_ranges([5, 0, 1, 2, 4090, 4091, 7, "node-2"]) == "0-2, 5, 7, 4,090-4,091, node-2"
    assert rank_ranges([]) == ""


def test_fsspec_urls_are_read_on_dask_and_a_missing_backend_is_one_line(job, rule_set):
    from trainwreck.errors import UsageError
    from trainwreck.scaleout.cluster import expand_urls

    names = [f"rank{r}.log" for r in (0, 1, failing_rank(RANKS), 200)]
    serial = report_json(diagnose([str(job / n) for n in names], ROOT, rule_set=rule_set, jobs=1))
    urls = [(job / n).as_uri() for n in names]
    on_dask = report_json(diagnose(urls, ROOT, rule_set=rule_set, scanner=dask_scanner()))

    def seen(report: dict[str, Any]) -> list[Any]:
        return [
            (f["entry"], f["initiating_rank"], f["ranks"], [e["line"] for e in f["evidence"]])
            for f in report["findings"]
        ]

    assert seen(on_dask) == seen(serial) and on_dask["stats"]["files"] == 4
    assert on_dask["findings"][0]["evidence"][0]["file"].startswith("file://")
    with pytest.raises(UsageError, match=r"^nosuch://bucket/x: Protocol not known: nosuch$"):
        expand_urls(["nosuch://bucket/x"])
