"""Honest links: the site's base URL is configured in one place (mkdocs.yml's site_url, from
TRAINWRECK_SITE_URL); without a real one, diagnose's `more:` link points to the local build or is
left out, never to a placeholder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainwreck.compile.bundle import is_real_site_url, site_url
from trainwreck.diagnose import diagnose
from trainwreck.formats import format_text

ROOT = Path(__file__).resolve().parents[1]
OOM_LOG = ROOT / "tests" / "logs" / "cuda-allocator-fragmentation" / "oom-current-hf-trainer.log"
ENTRY = "cuda-allocator-fragmentation"


@pytest.mark.parametrize(
    ("line", "env", "expected"),
    [
        (
            "site_url: https://kb.trainwreck-demo.net/docs",
            None,
            "https://kb.trainwreck-demo.net/docs/",
        ),
        (
            "site_url: 'https://kb.trainwreck-demo.net/'  # ours",
            None,
            "https://kb.trainwreck-demo.net/",
        ),
        ("site_url: https://trainwreck.example.org/", None, ""),
        ("site_url: https://docs.example.com/kb/", None, ""),
        ("site_url: http://localhost:8000/", None, ""),
        ('site_url: !ENV [TRAINWRECK_SITE_URL, ""]', None, ""),
        (
            'site_url: !ENV [TRAINWRECK_SITE_URL, ""]',
            "https://kb.trainwreck-demo.net",
            "https://kb.trainwreck-demo.net/",
        ),
        ('site_url: !ENV [TRAINWRECK_SITE_URL, ""]', "https://trainwreck.example.org/", ""),
        (
            "site_url: !ENV [TRAINWRECK_SITE_URL, https://kb.trainwreck-demo.net/]",
            None,
            "https://kb.trainwreck-demo.net/",
        ),
        ("site_url: !ENV TRAINWRECK_SITE_URL", None, ""),
        ("site_name: no url at all", None, ""),
    ],
)
def test_site_url_is_real_or_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, env: str | None, expected: str
) -> None:
    monkeypatch.delenv("TRAINWRECK_SITE_URL", raising=False)
    if env is not None:
        monkeypatch.setenv("TRAINWRECK_SITE_URL", env)
    (tmp_path / "mkdocs.yml").write_text(f"site_name: Demo\n{line}\n")
    assert site_url(tmp_path) == expected


def test_placeholder_hosts_are_not_real() -> None:
    assert not is_real_site_url("https://trainwreck.example.org/")
    assert not is_real_site_url("https://example.net")
    assert not is_real_site_url("https://kb.test/")
    assert not is_real_site_url("ftp://kb.trainwreck-demo.net/")
    assert is_real_site_url("https://someone.github.io/trainwreck/")


def test_repository_publishes_no_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINWRECK_SITE_URL", raising=False)
    assert site_url(ROOT) == ""
    for path in [ROOT / "mkdocs.yml", ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        assert "example.org" not in path.read_text(encoding="utf-8"), path
        assert "trainwreck.dev/" not in path.read_text(encoding="utf-8"), path


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the knowledge base (rules, entries, schemas, mkdocs.yml) without a built site."""
    monkeypatch.delenv("TRAINWRECK_SITE_URL", raising=False)
    root = tmp_path / "repo"
    for name in ("rules", "entries", "schemas"):
        shutil.copytree(ROOT / name, root / name)
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    return root


def test_more_link_without_a_site_is_left_out(repo: Path) -> None:
    report = diagnose([str(OOM_LOG)], repo, use_installed=False)
    finding = next(f for f in report.findings if f.entry == ENTRY)
    assert finding.url == ""
    text = format_text(report)
    assert "more:" not in text and "http" not in text.split("evidence:")[0]


def test_more_link_points_to_the_local_build(repo: Path) -> None:
    page = repo / "site" / "entries" / ENTRY / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html></html>")
    report = diagnose([str(OOM_LOG)], repo, use_installed=False)
    finding = next(f for f in report.findings if f.entry == ENTRY)
    assert finding.url == page.resolve().as_uri()
    assert f"more: {page.resolve().as_uri()}" in format_text(report)


def test_more_link_follows_the_configured_site(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    diagnose([str(OOM_LOG)], repo, use_installed=False)  # fills the rules cache without a URL
    monkeypatch.setenv("TRAINWRECK_SITE_URL", "https://kb.trainwreck-demo.net/")
    report = diagnose([str(OOM_LOG)], repo, use_installed=False)
    finding = next(f for f in report.findings if f.entry == ENTRY)
    assert finding.url == f"https://kb.trainwreck-demo.net/entries/{ENTRY}/"
