"""Logs without a rank, read together from one folder, are separate series: a broken run and a
fixed run side by side are not one run whose loss jumps where the second file starts."""

from __future__ import annotations

from pathlib import Path

from trainwreck import engine as eng
from trainwreck.compile.packs import compile_folder
from trainwreck.diagnose import diagnose

ROOT = Path(__file__).resolve().parents[1]


def losses(path: Path, values: list[float]) -> Path:
    path.write_text("".join(f"step {i} | loss {v:.3f}\n" for i, v in enumerate(values, 1)))
    return path


def test_unranked_files_in_one_folder_are_separate_series(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    losses(folder / "first.log", [1.0 + 0.01 * (i % 3) for i in range(40)])
    losses(folder / "second.log", [4.0 + 0.01 * (i % 3) for i in range(40)])
    report = diagnose([str(folder)], ROOT, use_installed=False, only={"loss-spike"})
    assert report.entries == []  # each run is flat; 4.0 after 1.0 is no spike
    # the same values in one file are one run, whose loss does jump four-fold
    one = losses(tmp_path / "one.log", [1.0] * 40 + [4.0] * 40)
    assert diagnose([str(one)], ROOT, use_installed=False, only={"loss-spike"}).entries == [
        "loss-spike"
    ]


def test_each_unranked_file_keeps_its_own_points(tmp_path: Path) -> None:
    bundle, _ = compile_folder(ROOT)
    rules = [r for r in bundle.rules if r["id"] == "loss-spike"]
    a = losses(tmp_path / "a.log", [1.0] * 30)
    b = losses(tmp_path / "b.log", [2.0] * 50)
    scan = eng.Engine(rules).scan([(str(p), str(p)) for p in (a, b)], jobs=1)
    series = scan.runs[0].series["loss"]
    counts = sorted((key.file, buffer.count) for key, buffer in series.items())
    assert counts == [(0, 30), (1, 50)]
    # positions count from each file's start
    assert [buffer.points().index[0] for buffer in series.values()] == [0.0, 0.0]
    outcome = eng.evaluate(scan.runs[0], scan)
    assert outcome.ranks == [] and outcome.initiating_rank is None
