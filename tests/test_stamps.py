"""Skipping unchanged stages: a second compile or build does nothing, a changed input redoes
exactly the stages that read it (trainwreck.stamps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_compile_cli import make_repo as make_rules_repo
from trainwreck import stamps
from trainwreck.cli import main

UNCHANGED = "unchanged since the last compile"


def compile_out(repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["compile", "--root", str(repo), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_second_compile_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_rules_repo(tmp_path / "repo")
    code, out = compile_out(repo, capsys)
    assert code == 0 and UNCHANGED not in out, out
    bundle = repo / "build" / "rules" / "bundle.json"
    written = bundle.stat().st_mtime_ns

    code, out = compile_out(repo, capsys)
    assert code == 0, out
    assert "compiled 1 rules for 1 entries, regression logs pass" in out and UNCHANGED in out
    assert bundle.stat().st_mtime_ns == written  # nothing was rewritten

    code, out = compile_out(repo, capsys, "--force")
    assert code == 0 and UNCHANGED not in out


def test_changed_regression_log_recompiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_rules_repo(tmp_path / "repo")
    assert compile_out(repo, capsys)[0] == 0
    healthy = repo / "tests" / "logs" / "demo" / "healthy.log"
    original = healthy.read_text()
    # The clean log now holds the failure: a compile that really runs the tests must fail.
    healthy.write_text("DemoError: widget exploded after 5 s\n")
    code, out = compile_out(repo, capsys)
    assert code == 1 and "rule fired on clean log" in out, out
    healthy.write_text(original)
    code, out = compile_out(repo, capsys)
    assert code == 0 and UNCHANGED not in out  # a failed compile leaves no stamp
    assert UNCHANGED in compile_out(repo, capsys)[1]


def test_changed_rule_or_missing_output_recompiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_rules_repo(tmp_path / "repo")
    assert compile_out(repo, capsys)[0] == 0
    rule = repo / "rules" / "demo-boom.yaml"
    rule.write_text(rule.read_text().replace("boom.t >= 1s", "boom.t >= 2s"))
    code, out = compile_out(repo, capsys)
    assert code == 1 and "rule did not fire" in out, out  # 1.5 s is below the new threshold
    rule.write_text(rule.read_text().replace("boom.t >= 2s", "boom.t >= 1s"))
    assert compile_out(repo, capsys)[0] == 0
    for wheel in (repo / "dist").glob("*.whl"):
        wheel.unlink()
    code, out = compile_out(repo, capsys)
    assert code == 0 and UNCHANGED not in out
    assert list((repo / "dist").glob("*.whl"))


def test_damaged_stamp_is_a_miss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_rules_repo(tmp_path / "repo")
    assert compile_out(repo, capsys)[0] == 0
    stamps.stamp_path(repo, "compile").write_text("{not json")
    code, out = compile_out(repo, capsys)
    assert code == 0 and UNCHANGED not in out
    assert UNCHANGED in compile_out(repo, capsys)[1]


def test_key_follows_content_not_time(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("one")
    first = stamps.Key("t").tree(folder).hexdigest()
    (folder / "a.txt").write_text("one")  # rewritten, same bytes
    assert stamps.Key("t").tree(folder).hexdigest() == first
    (folder / "a.txt").write_text("two")
    assert stamps.Key("t").tree(folder).hexdigest() != first
    (folder / "a.txt").write_text("one")
    (folder / "b.txt").write_text("")
    assert stamps.Key("t").tree(folder).hexdigest() != first


def test_second_build_skips_and_a_changed_entry_rebuilds(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    from tests.browser.fixture_repo import make_repo
    from trainwreck import site

    root = make_repo(tmp_path / "repo")
    lines: list[str] = []
    site.build(root, reproduce=False, progress=lines.append)
    assert not any("unchanged" in line for line in lines), lines
    page = root / "site" / "entries" / "demo-hardware" / "index.html"
    built = page.stat().st_mtime_ns

    lines.clear()
    summary = site.build(root, reproduce=False, progress=lines.append)
    assert summary.entries == 3 and summary.pages > 0
    assert any("unchanged, not regenerated" in line for line in lines), lines
    assert any("mkdocs.yml unchanged" in line for line in lines), lines
    assert page.stat().st_mtime_ns == built

    entry = root / "entries" / "demo-hardware.yaml"
    text = entry.read_text()
    assert "title: Replace the cable" in text
    entry.write_text(text.replace("title: Replace the cable", "title: Replace the plug"))
    lines.clear()
    site.build(root, reproduce=False, progress=lines.append)
    assert not any("unchanged" in line for line in lines), lines
    assert "Replace the plug" in page.read_text(encoding="utf-8")

    # A deleted site is rebuilt even though its inputs did not change.
    (root / "site" / "index.html").unlink()
    lines.clear()
    site.build(root, reproduce=False, progress=lines.append)
    assert not any("mkdocs.yml unchanged" in line for line in lines), lines
    assert (root / "site" / "index.html").is_file()


def test_key_is_the_same_from_a_relative_root(tmp_path: Path, monkeypatch) -> None:
    """`trainwreck compile` from the root and `trainwreck build` (absolute root) share a stamp."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("one")
    (tmp_path / "m.yml").write_text("x")
    monkeypatch.chdir(tmp_path)
    relative = stamps.Key("t").tree(Path("in")).file(Path("m.yml")).hexdigest()
    absolute = stamps.Key("t").tree(tmp_path / "in").file(tmp_path / "m.yml").hexdigest()
    assert relative == absolute


def test_changed_environment_in_mkdocs_yml_recompiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """site_url may come from the environment (`!ENV`): another value is another input."""
    repo = make_rules_repo(tmp_path / "repo")
    (repo / "mkdocs.yml").write_text(
        "site_name: Demo\nsite_url: !ENV [TW_STAMPS_TEST_URL, 'https://a.trainwreck-demo.net/']\n"
    )
    monkeypatch.delenv("TW_STAMPS_TEST_URL", raising=False)
    assert compile_out(repo, capsys)[0] == 0
    assert UNCHANGED in compile_out(repo, capsys)[1]
    monkeypatch.setenv("TW_STAMPS_TEST_URL", "https://b.trainwreck-demo.net/")
    code, out = compile_out(repo, capsys)
    assert code == 0 and UNCHANGED not in out
