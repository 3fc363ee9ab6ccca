"""What diagnose prints, word for word, in each format on a few regression logs.

The reports are for a person on call (docs/diagnose.md), so their text is a contract: a change
to a renderer, an entry's quick answer, its first confirm check or its fix shows here as a
diff. To accept a deliberate change, regenerate and review the diff before committing:

    TRAINWRECK_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_diagnose_snapshots.py -n 0

Only what differs between machines and runs is normalised: the seconds, the number of rules
(other rules are added all the time) and the link to a local site build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from trainwreck.diagnose import diagnose
from trainwreck.formats import FORMATS, render

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "tests" / "snapshots"
UPDATE = os.environ.get("TRAINWRECK_UPDATE_SNAPSHOTS") == "1"

CASES = {
    # two findings, the second an effect of the first; parsed sizes; several ranks
    "fragmentation-4ranks": "tests/logs/cuda-allocator-fragmentation/oom-current-torchrun-4ranks.log",
    # torchrun's "failed (exitcode: -9)" table: the host OOM kill, its dmesg check
    "host-oom-8ranks": "tests/logs/host-oom-sigkill/torch2.4-torchrun-8ranks-sigkill.log",
    # no rule fires: nothing to say
    "unrelated-error": "tests/logs/cuda-allocator-fragmentation/unrelated-syntaxerror.log",
    # no rule fires, but the error line is close to entries: suggestions, with their why
    "suggestions": "tests/snapshots/unmatched-loss-scale-error.log",
}
SUFFIX = {"text": "txt", "markdown": "md", "json": "json"}


def normalised(text: str) -> str:
    text = re.sub(r"(MB), [0-9.]+ s, [0-9]+ rules", r"\1, <T> s, <N> rules", text)
    text = re.sub(r'"seconds": [0-9.e+-]+', '"seconds": 0', text)
    text = re.sub(r'"rules": [0-9]+,', '"rules": 0,', text)
    return re.sub(r'"rule_sources": \[[^\]]*\]', '"rule_sources": []', text)


@pytest.fixture(scope="module")
def reports(monkeypatch_module: pytest.MonkeyPatch) -> dict:
    monkeypatch_module.chdir(ROOT)  # inputs named relative to the root, as a user types them
    monkeypatch_module.delenv("TRAINWRECK_SITE_URL", raising=False)
    found = {}
    for name, path in CASES.items():
        report = diagnose([path], ROOT, use_installed=False)
        report.findings = [dataclasses.replace(f, url="") for f in report.findings]
        found[name] = report
    return found


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("case", list(CASES))
def test_report_matches_its_snapshot(reports: dict, case: str, fmt: str) -> None:
    shown = normalised(render(reports[case], fmt))
    snapshot = SNAPSHOTS / f"{case}.{SUFFIX[fmt]}"
    if UPDATE or not snapshot.is_file():
        snapshot.write_text(shown, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{snapshot} was missing and has been written: review and commit it")
    assert shown == snapshot.read_text(encoding="utf-8"), (
        f"{case} ({fmt}) differs from {snapshot.relative_to(ROOT)}; if the change is deliberate, "
        "regenerate with TRAINWRECK_UPDATE_SNAPSHOTS=1 and review the diff"
    )


def test_a_finding_leads_with_what_to_do_and_the_numbers(reports: dict) -> None:
    """The first lines of a finding are its quick answer and the figures the rule compared;
    the fix's one-line command comes before its explanation; nothing is said twice."""
    text = render(reports["fragmentation-4ranks"], "text").splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("1. "))
    assert text[start + 1].startswith("   Free GPU memory is scattered")
    # free is shown since the fragmentation condition reads it (free + reserve must reach the
    # request), and alloc for the bound under a memory fraction (allowed - alloc); this message
    # prints no allowed figure, so none is shown
    assert text[start + 2] == (
        "   numbers: alloc 58.02 GiB, free 2.31 GiB, req 3.75 GiB, unalloc 18.26 GiB"
    )
    assert text[start + 3] == "   ranks: 2; initiating rank 2"
    fix = next(i for i, line in enumerate(text) if line.startswith("   fix: "))
    assert text[fix + 1] == "     1. export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert not any(line.startswith(("   seen:", "   why:")) for line in text)
    verbose = render(reports["fragmentation-4ranks"], "text", verbose=True)
    assert "   rules: allocator-fragmentation-oom" in verbose and "   why: " in verbose
    host = render(reports["host-oom-8ranks"], "text")
    assert "   confirm: Look for the kernel's OOM kill" in host
    assert '     $ dmesg -T | grep -Ei "out of memory|oom-kill|killed process"' in host


def test_markdown_fences_code_and_keeps_evidence_whole(reports: dict) -> None:
    report = reports["fragmentation-4ranks"]
    markdown = render(report, "markdown")
    assert "1. ```\n   export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in markdown
    evidence = report.findings[0].evidence[0].text
    assert len(evidence) > 200 and f"`{evidence}`" in markdown
    data = json.loads(render(report, "json"))
    assert data["findings"][0]["numbers"]["unalloc"]["unit"] == "B"
    assert data["findings"][0]["confirm"]["check"].startswith("Read the OOM message")
    # an entry's `code spans` are real inline code, not escaped backticks
    host = render(reports["host-oom-8ranks"], "markdown")
    assert "`from_pretrained` always loads" in host and "\\`from_pretrained" not in host
