"""The site: honest reproduction status, notebook rendering, generated pages, strict build."""

from __future__ import annotations

import json
import re
import sys
from html import unescape
from pathlib import Path

import pytest

from tests.browser.fixture_repo import FIX_WORD, fake_run, make_repo, notebook, png_bytes
from trainwreck import site
from trainwreck.cli import main
from trainwreck.model import Entry, load_entries, load_entry
from trainwreck.reproduce.records import RunRecord
from trainwreck.site import text as site_text

pytest.importorskip("mkdocs")
pytest.importorskip("material")


def _entry(reproduction: dict, entry_id: str = "demo") -> Entry:
    data = {"id": entry_id, "title": "Demo", "reproduction": reproduction, "related": []}
    return Entry(entry_id, Path(f"entries/{entry_id}.yaml"), data, None)  # type: ignore[arg-type]


RECORD = {
    "status": "passed",
    "source_hash": "abc",
    "host": {"cpu": "Demo CPU 9000", "gpu": None, "driver": None},
    "versions": {"python": "3.11.2", "torch": "2.13.0", "cuda": None},
    "started": "2026-11-30T01:02:03+00:00",
}


# --- status -----------------------------------------------------------------------------------


def test_status_reproduced_names_host_date_versions() -> None:
    entry = _entry({"notebook": "n.ipynb", "device": "cpu"})
    status = site.status_for(entry, RunRecord.from_json(RECORD), {"abc"})
    assert status.kind == "reproduced" and status.show_outputs
    assert status.sentence == (
        "Reproduced on Demo CPU 9000 on 2026-11-30 01:02 UTC with Python 3.11.2, torch 2.13.0; "
        "fingerprint asserted."
    )


def test_status_is_stale_when_the_notebook_changed() -> None:
    entry = _entry({"notebook": "n.ipynb", "device": "cpu"})
    status = site.status_for(entry, RunRecord.from_json(RECORD), {"new"})
    assert status.kind == "stale"
    assert not status.show_outputs
    assert "older version of the notebook" in status.sentence
    assert "Reproduced" not in status.sentence


def test_status_recorded_on_gpu() -> None:
    record = dict(RECORD, status="recorded-gpu")
    record["host"] = {"cpu": "x", "gpu": "NVIDIA H200", "driver": "570.1"}
    record["versions"] = {"python": "3.11", "torch": "2.13.0", "cuda": "12.8"}
    entry = _entry({"notebook": "n.ipynb", "device": "gpu"})
    status = site.status_for(entry, RunRecord.from_json(record), {"abc"})
    assert status.kind == "recorded" and status.show_outputs
    assert status.sentence.startswith("Recorded on GPU NVIDIA H200 on 2026-11-30 01:02 UTC")
    assert "CUDA 12.8" in status.sentence and "driver 570.1" in status.sentence


@pytest.mark.parametrize(
    ("reproduction", "record", "kind", "words"),
    [
        ({"notebook": "n.ipynb", "device": "gpu"}, dict(RECORD, status="skipped-needs-gpu"),
         "needs-gpu", "Not yet reproduced: needs a GPU"),
        ({"notebook": "n.ipynb", "device": "gpu"}, None, "needs-gpu", "needs a GPU"),
        ({"notebook": "n.ipynb", "device": "cpu"}, None, "not-run", "Not yet reproduced"),
        ({"not_reproducible": "A cable\n  fails."}, None, "not-reproducible",
         "Not reproducible: A cable fails."),
        ({"notebook": "n.ipynb", "device": "cpu"},
         dict(RECORD, status="failed", error={"cell": 3, "message": "AssertionError: 3"}),
         "failed", "stopped at cell 3: AssertionError: 3"),
        ({"notebook": "n.ipynb", "device": "cpu"}, dict(RECORD, status="stale"), "stale",
         "Stale"),
    ],
)  # fmt: skip
def test_status_never_claims_a_run(reproduction, record, kind, words) -> None:
    record = RunRecord.from_json(record) if record is not None else None
    status = site.status_for(_entry(reproduction), record, {"abc"})
    assert status.kind == kind
    assert words in status.sentence
    assert not status.show_outputs
    assert "Reproduced on" not in status.sentence and "Recorded on" not in status.sentence


def test_current_hashes_follow_the_notebook(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", with_rule=False)
    entry = load_entry(root / "entries/demo-straggler.yaml", root)
    before = site.current_hashes(root, entry)
    assert len(before) == 2  # ci and full
    data = notebook()
    data["cells"][2]["source"] += "\nprint('changed')"
    (root / "notebooks/demo-straggler.ipynb").write_text(json.dumps(data))
    assert site.current_hashes(root, entry).isdisjoint(before)


# --- notebook rendering -------------------------------------------------------------------------


def test_render_notebook_writes_figures_and_outputs(tmp_path: Path) -> None:
    import base64

    data = notebook()
    data["cells"][2]["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": ["\x1b[31mred\x1b[0m ", "line\n"]},
    ]
    data["cells"][4]["outputs"] = [
        {
            "output_type": "display_data",
            "data": {
                "image/png": base64.b64encode(png_bytes()).decode(),
                "text/plain": "<Figure size 1x1 with 1 Axes>",
            },
            "metadata": {},
        },
        {
            "output_type": "error",
            "ename": "AssertionError",
            "evalue": "3",
            "traceback": ["\x1b[0;31mAssertionError\x1b[0m: 3"],
        },
    ]
    rendered = site.render_notebook(data, tmp_path, prefix="figure", show_outputs=True)
    assert rendered.figures == ["figure-1.png"]
    assert (tmp_path / "figure-1.png").read_bytes() == png_bytes()
    assert "![Figure 1 of the executed reproduction](figure-1.png)" in rendered.markdown
    assert "red line" in rendered.markdown and "\x1b" not in rendered.markdown
    assert "AssertionError: 3" in rendered.markdown
    assert "<Figure size" not in rendered.markdown
    assert "### Demo straggler" in rendered.markdown  # headings demoted under the page's
    assert "#### Before and after" in rendered.markdown


def test_render_notebook_without_outputs_shows_no_outputs(tmp_path: Path) -> None:
    import base64

    data = notebook()
    data["cells"][4]["outputs"] = [
        {
            "output_type": "display_data",
            "data": {"image/png": base64.b64encode(png_bytes()).decode()},
            "metadata": {},
        }
    ]
    data["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "claimed\n"}]
    rendered = site.render_notebook(data, tmp_path, prefix="figure", show_outputs=False)
    assert rendered.figures == []
    assert "claimed" not in rendered.markdown
    assert "plt.show()" in rendered.markdown  # the code is still there to read
    assert not list(tmp_path.iterdir())


def test_long_code_cells_fold_away(tmp_path: Path) -> None:
    data = notebook()
    data["cells"][2]["source"] = "\n".join(f"x{i} = {i}" for i in range(40))
    rendered = site.render_notebook(data, tmp_path, prefix="figure", show_outputs=False)
    assert '??? example "The code of this cell (40 lines)"\n\n    ```python\n    x0 = 0' in (
        rendered.markdown
    )
    assert "```python\nfig, ax" in rendered.markdown  # short cells stay open


def test_long_output_is_clipped() -> None:
    text = "\n".join(f"line {i}" for i in range(500))
    clipped = site_text.clip(text, 60)
    assert len(clipped.split("\n")) == 61
    assert "(440 lines omitted)" in clipped


def test_fence_outlasts_backticks_in_code() -> None:
    fenced = site_text.fenced("a ```` b", "text")
    assert fenced.startswith("`````text\n") and fenced.endswith("\n`````")


def test_table_cells_are_one_line_with_pipes_escaped() -> None:
    assert site_text.inline_md("a | b\n  c") == "a \\| b c"
    # A code span is rendered (and sanitised) before the table sees it; its pipe stays escaped.
    assert site_text.inline_md("x `a|b` | y") == "x <code>a\\|b</code> \\| y"
    assert site_text.code_span("a`b|c") == "``a`b|c``"


def test_pipes_in_cells_and_code_spans_render_in_one_cell() -> None:
    import markdown

    table = f"| a | b |\n|---|---|\n| {site_text.inline_md('x `a|b` | y')} | z |\n"
    html = markdown.markdown(table, extensions=["tables"])
    assert "<td>x <code>a|b</code> | y</td>" in html
    assert "<td>z</td>" in html


def test_regex_with_alternation_renders_in_the_rule_table() -> None:
    import markdown

    rule = site.Rule("r", "rules/r.yaml", {"matchers": {"m": {"regex": "(?:a|b) `x`"}}}, "id: r\n")
    html = markdown.markdown(site.render_rule(rule), extensions=["tables", "admonition"])
    assert "<code>(?:a|b) `x`</code>" in html


# --- related links and nav ---------------------------------------------------------------------


def test_related_links_go_both_ways(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", with_rule=False)
    entries, _ = load_entries(root)
    links = site.related_links(entries)
    straggler = {(link.id, link.relation, link.reverse) for link in links["demo-straggler"]}
    assert straggler == {
        ("demo-fragmentation", "confused-with", False),
        ("demo-hardware", "see-also", False),
    }
    # demo-hardware names nothing, yet its page links back; mutual links are not doubled.
    assert [(link.id, link.reverse) for link in links["demo-hardware"]] == [
        ("demo-straggler", True)
    ]
    assert [link.id for link in links["demo-fragmentation"]] == ["demo-straggler"]


def test_compose_nav_expands_failures_and_drops_missing_pages(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text("# Home\n")
    (tmp_path / "probe.md").write_text("# Probe\n\nThis page has not been written yet.\n")
    base = [
        {"Home": "index.md"},
        {"Using": [{"Missing": "missing.md"}, {"Home again": "index.md"}]},
        {"Failures": "entries/index.md"},
        {"Probe": "probe.md"},
    ]
    failures = [{"All failures": "entries/index.md"}]
    nav = site.compose_nav(base, failures, tmp_path)
    assert nav == [
        {"Home": "index.md"},
        {"Using": [{"Home again": "index.md"}]},
        {"Failures": failures},
    ]


# --- the fact check's badge ----------------------------------------------------------------------


def _checked_entry(*, digest: str | None = None, status: str = "reviewed") -> Entry:
    from trainwreck.knowledge.checked import content_digest

    data = {"id": "demo", "title": "Demo", "summary": "s", "status": status, "related": []}
    block = {
        "date": "2026-12-01",
        "by": "a reviewer who did not write it",
        "ledger": "docs/audits/demo.md",
        "claims": {"checked": 12, "held": 9, "corrected": 2, "unconfirmed": 1},
        "against": ["torch 2.13.0 (installed) torch/serialization.py"],
        "not_verified": ["the GPU path (no GPU)"],
        "digest": digest or content_digest(data),
    }
    return Entry("demo", Path("entries/demo.yaml"), {**data, "checked": block}, None)  # type: ignore[arg-type]


def test_review_badge_says_reviewed_only_while_the_digest_is_current() -> None:
    review = site.review_status_for(_checked_entry())
    assert review.kind == "reviewed" and review.label == "reviewed 2026-12-01"
    assert review.sentence == (
        "Reviewed on 2026-12-01 by a reviewer who did not write it; 12 claims checked: 9 held, "
        "2 corrected, 1 unconfirmed."
    )
    assert review.checked is not None and review.checked.not_verified == ("the GPU path (no GPU)",)


def test_review_badge_after_an_edit_says_changed_since_review() -> None:
    review = site.review_status_for(_checked_entry(digest="0" * 12))
    assert review.kind == "changed" and review.label == "changed since review"
    assert "edited after its check on 2026-12-01" in review.sentence
    assert "Reviewed" not in review.sentence and "reviewed 2026" not in review.label


@pytest.mark.parametrize("status", ["draft", "reviewed", "verified"])
def test_without_a_block_it_is_not_yet_reviewed_whatever_the_status_says(status: str) -> None:
    data = {"id": "demo", "title": "Demo", "status": status, "related": []}
    entry = Entry("demo", Path("entries/demo.yaml"), data, None)  # type: ignore[arg-type]
    review = site.review_status_for(entry)
    assert (review.kind, review.label, review.checked) == ("not-reviewed", "not yet reviewed", None)


def test_the_page_shows_the_check_and_links_the_ledger(tmp_path: Path) -> None:
    """A built page: the badge in the header, the line beside the reproduction status, and the
    Fact check section with totals, sources, what was not verified and the published ledger;
    an edited entry says so, an unchecked one says it is not yet reviewed."""
    import yaml

    from trainwreck.knowledge.checked import content_digest

    root = make_repo(tmp_path / "repo")
    fake_run(root)
    path = root / "entries/demo-straggler.yaml"
    digest = content_digest(yaml.safe_load(path.read_text()))
    block = (
        "checked:\n  date: '2026-12-01'\n  by: an audit that did not write it\n"
        "  ledger: docs/audits/demo-straggler.md\n"
        "  claims: {checked: 5, held: 3, corrected: 2, unconfirmed: 0}\n"
        "  against:\n    - CPython 3.11 Modules/gcmodule.c\n"
        "  not_verified:\n    - the 5K-GPU figure of the paper\n"
        f"  digest: {digest}\n"
    )
    path.write_text(path.read_text().replace("status: draft", "status: reviewed") + block)
    (root / "docs/audits/demo-straggler.md").write_text("# Audit: demo-straggler\n\nThe rows.\n")
    gpu = root / "entries/demo-fragmentation.yaml"
    gpu.write_text(
        gpu.read_text()
        + block.replace(digest, "'" + "0" * 12 + "'").replace(
            "demo-straggler.md", "demo-fragmentation.md"
        )
    )
    (root / "docs/audits/demo-fragmentation.md").write_text("# Audit: demo-fragmentation\n")
    site.build(root, reproduce=False)

    html = _page(root, "entries/demo-straggler/index.html")
    assert '<span class="tw-chip tw-review tw-review-reviewed">reviewed 2026-12-01</span>' in html
    assert (
        "Reviewed on 2026-12-01 by an audit that did not write it; 5 claims checked: 3 held, "
        "2 corrected, 0 unconfirmed." in html
    )
    section = html.split('id="fact-check"')[1].split('id="reproduction"')[0]
    assert "CPython 3.11 Modules/gcmodule.c" in section
    assert "the 5K-GPU figure of the paper" in section
    assert 'href="../../audits/demo-straggler/"' in section
    assert (root / "site/audits/demo-straggler/index.html").is_file()
    # The ledger quotes the messages it checked; search leads to the entry, not the ledger.
    locations = {
        doc["location"].split("#")[0]
        for doc in json.loads((root / "site/search/search_index.json").read_text())["docs"]
    }
    assert "entries/demo-straggler/" in locations
    assert not any(location.startswith("audits/demo") for location in locations), locations
    assert (root / "docs/audits/demo-straggler.md").read_text().startswith("# Audit")
    assert html.index('id="fact-check"') < html.index('id="reproduction"')
    assert ">draft<" not in html and ">reviewed<" not in html  # the status field is not the badge

    changed = _page(root, "entries/demo-fragmentation/index.html")
    assert "tw-review-changed" in changed and "changed since review" in changed
    assert "reviewed 2026-12-01" not in changed
    unchecked = _page(root, "entries/demo-hardware/index.html")
    assert "tw-review-not-reviewed" in unchecked and "Not yet reviewed" in unchecked
    assert 'href="../../audits/"' in unchecked  # how an entry is checked


# --- the build -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture repository built with a recorded (fake) run and --no-reproduce."""
    root = make_repo(tmp_path_factory.mktemp("site") / "repo")
    fake_run(root)
    summary = site.build(root, reproduce=False)
    assert summary.entries == 3
    assert summary.rules == 1
    assert summary.notebooks == {"cached": 1, "skipped": 1}
    assert summary.figures == 1
    return root


def _page(root: Path, path: str) -> str:
    return (root / "site" / path).read_text(encoding="utf-8")


def test_entry_page_has_every_section_in_order(built: Path) -> None:
    html = _page(built, "entries/demo-straggler/index.html")
    order = [
        'id="demo-straggler-stalls-every-rank"',
        "Quick answer",
        'id="symptoms"',
        'id="confirm-it"',
        'id="fix"',
        'id="primary-fix-freeze-the-heap-to-unclog-the-ranks"',
        'id="fallback-collect-on-a-schedule"',
        'id="verify-the-fix"',
        'id="code-examples"',
        'id="at-scale"',
        'id="prevention"',
        'id="how-it-happens"',
        'id="detection"',
        'id="reproduction"',
        'id="affected-systems"',
        'id="faq"',
        'id="references"',
        'id="related-failures"',
    ]
    positions = [html.index(marker) for marker in order]
    assert positions == sorted(positions)


def test_entry_page_symptoms_table_and_tabs(built: Path) -> None:
    html = _page(built, "entries/demo-straggler/index.html")
    assert "<th>What you observe</th>" in html and "<th>Why it happens</th>" in html
    assert "a pipe | inside the cell" in html  # the escaped pipe stays in its cell
    assert 'class="tabbed-set' in html  # one tab per framework
    assert "PyTorch: Freeze after start-up" in html and "Megatron-LM" in html
    assert "md-clipboard" in html or "content.code.copy" in html


def test_entry_page_embeds_the_executed_notebook(built: Path) -> None:
    html = _page(built, "entries/demo-straggler/index.html")
    assert "Reproduced on Demo CPU 9000 on 2026-11-30 01:02 UTC" in html
    assert "fingerprint asserted" in html
    assert '<img alt="Figure 1 of the executed reproduction" src="figure-1.png"' in html
    assert (built / "site/entries/demo-straggler/figure-1.png").read_bytes() == png_bytes()
    assert "spikes before the fix: 4, after: 0" in html
    assert "spikes_broken" in html  # metrics.json
    assert "[rank0]: step 1 time_ms" in html  # the broken log's first lines


def test_entry_page_shows_its_rule(built: Path) -> None:
    html = _page(built, "entries/demo-straggler/index.html")
    assert "Step time spikes on every rank" in html
    assert "rules/demo-straggler-steps.yaml" in html
    assert "Recurring step-time spikes on all ranks at once" in html
    rules = _page(built, "rules/index.html")
    assert "demo-straggler-steps" in rules and "../entries/demo-straggler/" in rules
    assert 'href="../entries/demo-straggler/#rule-demo-straggler-steps"' in rules
    assert 'id="rule-demo-straggler-steps"' in html


def test_statuses_of_the_other_entries(built: Path) -> None:
    gpu = _page(built, "entries/demo-fragmentation/index.html")
    assert "Not yet reproduced: needs a GPU" in gpu
    assert "Reproduced on" not in gpu
    assert "is_available" in gpu  # the source is shown, without outputs
    hardware = _page(built, "entries/demo-hardware/index.html")
    assert "Not reproducible: Software cannot break a cable." in hardware


def test_reverse_related_link(built: Path) -> None:
    hardware = _page(built, "entries/demo-hardware/index.html")
    assert 'href="../demo-straggler/"' in hardware
    assert "linked from that entry" in hardware


def test_index_tag_and_severity_pages(built: Path) -> None:
    index = _page(built, "entries/index.html")
    for title in (
        "Demo straggler stalls every rank",
        "Demo fragmentation needs a GPU",
        "Demo hardware fault",
    ):
        assert title in index
    assert index.index("Reliability") < index.index("Performance") < index.index("Infrastructure")
    severity = _page(built, "by-severity/index.html")
    assert severity.index("Critical") < severity.index("High") < severity.index("Low")
    # Only a tag two entries share gets a page; a tag of one entry stays a word on its page.
    demo = _page(built, "tags/demo/index.html")
    assert "Demo straggler" in demo and "Demo fragmentation" in demo
    assert 'href="demo/"' in _page(built, "tags/index.html")
    for lonely in ("straggler", "memory", "hardware"):
        assert not (built / "site" / "tags" / lonely).exists()
        assert f'href="{lonely}/"' not in _page(built, "tags/index.html")
    assert '<span class="tw-tag">#hardware</span>' in _page(
        built, "entries/demo-hardware/index.html"
    )
    home = _page(built, "index.html")
    assert "executable encyclopedia" in home
    assert "Contributing" in home and "Rule language" in home


def test_search_index_holds_the_fix(built: Path) -> None:
    index = json.loads(_page(built, "search/search_index.json"))
    hits = [
        doc["location"]
        for doc in index["docs"]
        if FIX_WORD in doc["text"].lower() + doc["title"].lower()
    ]
    assert any(location.startswith("entries/demo-straggler/") for location in hits)


def test_palettes_and_site_url_setting(built: Path) -> None:
    html = _page(built, "index.html")
    assert 'data-md-color-scheme="default"' in html
    assert "slate" in html  # the dark palette toggle
    # No site address is configured: no canonical link to a made-up domain.
    assert "example.org" not in html and 'rel="canonical"' not in html


def test_stale_run_is_not_shown(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    fake_run(root, stale=True)
    site.build(root, reproduce=False)
    html = _page(root, "entries/demo-straggler/index.html")
    assert "Stale: the recorded run is for an older version of the notebook" in html
    assert "Reproduced on" not in html
    assert "figure-1.png" not in html
    assert "spikes before the fix: 4" not in html  # the output; the source stays readable


def test_failed_run_fails_the_build_and_says_so(tmp_path: Path, capsys) -> None:
    root = make_repo(tmp_path / "repo")
    fake_run(root, status="failed")
    assert main(["build", "--root", str(root), "--no-reproduce"]) == 1
    captured = capsys.readouterr()
    assert "1 notebook(s) failed" in captured.err
    html = _page(root, "entries/demo-straggler/index.html")
    assert "stopped at cell 2: AssertionError: 3" in html
    assert main(["build", "--root", str(root), "--no-reproduce", "--strict"]) == 1
    assert "--strict" in capsys.readouterr().err


def test_build_without_manifest_says_not_run(tmp_path: Path, capsys) -> None:
    root = make_repo(tmp_path / "repo")
    assert main(["build", "--root", str(root), "--no-reproduce"]) == 0
    captured = capsys.readouterr()
    assert "entries:   3" in captured.out and "pages:" in captured.out and "time:" in captured.out
    html = _page(root, "entries/demo-straggler/index.html")
    assert "Not yet reproduced: this build has no run of the notebook" in html


def test_broken_link_fails_the_strict_build(tmp_path: Path, capsys) -> None:
    root = make_repo(tmp_path / "repo")
    text = (root / "entries/demo-hardware.yaml").read_text()
    (root / "entries/demo-hardware.yaml").write_text(
        text.replace("summary: A cable fails.", "summary: A cable fails, see [this](nowhere.md).")
    )
    assert main(["build", "--root", str(root), "--no-reproduce"]) == 1
    err = capsys.readouterr().err
    assert "entries/demo-hardware.yaml: link 'nowhere.md' points to no page" in err
    assert "Traceback" not in err


def test_missing_image_fails_the_strict_build(tmp_path: Path, capsys) -> None:
    root = make_repo(tmp_path / "repo")
    (root / "docs/reading.md").write_text("# Read\n\n![a figure](missing.png)\n")
    assert main(["build", "--root", str(root), "--no-reproduce"]) == 1
    err = capsys.readouterr().err
    assert "missing.png" in err and "Traceback" not in err


def test_invalid_entry_stops_the_build_with_its_location(tmp_path: Path, capsys) -> None:
    root = make_repo(tmp_path / "repo")
    text = (root / "entries/demo-hardware.yaml").read_text()
    (root / "entries/demo-hardware.yaml").write_text(text.replace("severity: low", "severity: hi"))
    assert main(["build", "--root", str(root), "--no-reproduce"]) == 1
    err = capsys.readouterr().err
    assert "entries/demo-hardware.yaml:5:11: severity:" in err
    assert "trainwreck build: check: 1 error(s)" in err
    assert not (root / "site").exists()


def test_not_a_repository(tmp_path: Path, capsys) -> None:
    assert main(["build", "--root", str(tmp_path), "--no-reproduce"]) == 1
    assert "no entries/ folder" in capsys.readouterr().err


def test_serve_without_a_site(tmp_path: Path, capsys) -> None:
    assert main(["serve", "--root", str(tmp_path)]) == 2
    assert "run `trainwreck build` first" in capsys.readouterr().err


def test_serve_serves_the_site(built: Path) -> None:
    import threading
    import urllib.request

    server = site.make_server(built / "site")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/entries/demo-straggler/") as reply:
            assert b"Demo straggler stalls every rank" in reply.read()
    finally:
        server.shutdown()
        server.server_close()


def test_the_repository_site_builds(tmp_path: Path, reproduced_manifest: dict) -> None:
    """Every real entry gets its page with its reproduction and its rules, from the notebooks
    this host ran (the session's shared reproduce run), and the real docs build strictly."""
    from tests.browser.fixture_repo import REPO

    summary = site.build(
        REPO, reproduce=False, site_dir=tmp_path / "site", docs_dir=tmp_path / "docs"
    )
    entries, _ = load_entries(REPO)
    assert summary.entries == len(entries) > 0
    records = {r["id"]: r for r in reproduced_manifest["notebooks"]}
    for entry in entries:
        page = tmp_path / "site/entries" / entry.id / "index.html"
        html = page.read_text(encoding="utf-8")
        assert 'id="reproduction"' in html, entry.id
        for rule_id in (entry.data.get("fingerprint") or {}).get("rules") or []:
            assert f"rules/{rule_id}.yaml" in html, (entry.id, rule_id)
        several = len(entry.reproductions) > 1
        for reproduction in entry.reproductions:  # each with its own run and status
            record = records.get(reproduction.id)
            if record is not None and record["status"] == "passed":
                ran = "CPU replay ran on CPU" if reproduction.replay else "Reproduced on"
                assert ran in html and "fingerprint asserted" in html, reproduction.id
                prefix = f"figure-{reproduction.id}-" if several else "figure-"
                figures = list(page.parent.glob(f"{prefix}*.png"))
                assert figures, f"{reproduction.id}: no figure from its executed notebook"
            elif record is not None and record["status"] == "skipped-needs-gpu":
                said = "GPU notebook not run here" if several else "Not yet reproduced: needs a GPU"
                assert said in html, reproduction.id
            if reproduction.not_reproducible is not None:
                assert "Not reproducible:" in html, entry.id
    # the theme's search worker is the repaired one (search_worker.py)
    (worker,) = (tmp_path / "site/assets/javascripts/workers").glob("search.*.min.js")
    assert '.id+","}' in worker.read_text(encoding="utf-8")


def test_missing_executed_copy_is_said(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    fake_run(root)
    (root / "build/executed/demo-straggler.ipynb").unlink()
    site.build(root, reproduce=False)
    html = _page(root, "entries/demo-straggler/index.html")
    assert "is missing from this build" in html
    assert "figure-1.png" not in html


def test_importing_the_site_module_stays_light() -> None:
    """`trainwreck build --help` and the core install must not pay for mkdocs or jupyter."""
    import subprocess

    code = (
        "import sys, trainwreck.site, trainwreck.scaffold\n"
        "heavy = [m for m in ('mkdocs', 'material', 'nbformat', 'nbclient', 'torch', 'matplotlib')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_build_without_rules(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", with_rule=False)
    summary = site.build(root, reproduce=False)
    assert summary.rules == 0
    assert "No detection rule covers this failure yet." in _page(
        root, "entries/demo-straggler/index.html"
    )


# --- triage, quick answers, messages (issue 20) ------------------------------------------------


def test_triage_page_nests_candidates_under_symptom_and_component(built: Path) -> None:
    html = _page(built, "triage/index.html")
    assert "What are you seeing?" in html
    # symptom -> component -> candidate, as plain nested lists (no JavaScript needed)
    oom = html.index('id="symptom-out-of-memory"')
    allocator = html.index('id="out-of-memory-allocator"', oom)
    assert html.index('href="../entries/demo-fragmentation/"', allocator) > allocator
    assert "The allocator fragments: set expandable segments." in html
    assert "First check:" in html and "Read the OOM message." in html
    # the confused-with link tells the two demo entries apart
    assert "Not to be confused with" in html
    for entry_id in ("demo-straggler", "demo-fragmentation", "demo-hardware"):
        assert f'href="../entries/{entry_id}/"' in html
    assert 'data-framework="any deepspeed"' in html
    assert "javascripts/triage.js" in html
    home = _page(built, "index.html")
    assert 'href="triage/"' in home  # the home page and the nav lead to it


def test_index_rows_show_the_whole_quick_answer(built: Path) -> None:
    index = _page(built, "entries/index.html")
    assert "The allocator fragments: set expandable segments." in index
    assert "One rank pauses and the others wait; freeze the heap after start-up." in index
    assert "…" not in index


def test_entry_page_lists_the_messages_its_rules_recognise(built: Path) -> None:
    html = _page(built, "entries/demo-straggler/index.html")
    # the one-line quick answer opens the Quick answer box
    opening = re.search(r'<div class="tw-quick-answer">(.*?)</div>', html, re.S)
    assert opening and "One rank pauses and the others wait" in unescape(opening.group(1))
    start, end = html.index("Messages this failure prints"), html.index('id="symptoms"')
    assert start < end  # in the page's opening part, collapsed
    assert "<details" in html[start - 200 : start]
    text = re.sub(r"<[^>]+>", "", html[start:end])
    assert "step 1 time_ms 101.0" in text  # one line per shape, without the rank prefix
    assert "step 2 time_ms" not in text and "[rank0]:" not in text


@pytest.mark.parametrize(
    ("text", "first"),
    [
        (
            '"CUDA out of memory. Tried to allocate X" with little reserve. Then more.',
            '"CUDA out of memory. Tried to allocate X" with little reserve.',
        ),
        (
            "Set `torch.backends.cudnn.benchmark`. Then more.",
            "Set `torch.backends.cudnn.benchmark`.",
        ),
        (
            "A value (e.g. 1.5 or 2. or more) is fine. Next.",
            "A value (e.g. 1.5 or 2. or more) is fine.",
        ),
        ("No full stop at all", "No full stop at all"),
    ],
)
def test_first_sentence_respects_quotes_code_and_brackets(text: str, first: str) -> None:
    assert site_text.first_sentence(text) == first


def test_repository_rows_and_triage_reach_every_entry(repo_root: Path) -> None:
    """Over the real entries: every summary cell is a whole line that ends a sentence, and the
    triage page lists every entry under each of its symptoms."""
    from trainwreck.vocabulary import load_vocabulary

    entries, problems = load_entries(repo_root)
    assert not problems
    statuses = {e.id: site.status_for(e, None, set()) for e in entries}
    pages = site.render_indexes(entries, statuses, [])
    rows = [line for line in pages["entries/index.md"].splitlines() if line.startswith("| [")]
    assert len(rows) == len(entries)
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert cell[-1] in ".!?" and "…" not in cell, row
        assert cell.count('"') % 2 == 0 and cell.count("`") % 2 == 0, row
    cuda_oom = next(
        row for row in rows if "entries/cuda-oom-capacity/" in row or "(cuda-oom-capacity/" in row
    )
    assert not cuda_oom.rstrip(" |").endswith('"CUDA out of memory.')
    triage = site.render_triage(entries, load_vocabulary(repo_root), site.related_links(entries))
    for entry in entries:
        for symptom in entry.data["facets"]["symptom"]:
            section = triage.split(f'data-symptom="{symptom}"', 1)[1].split("tw-triage-symptom", 1)[
                0
            ]
            assert f"(entries/{entry.id}/index.md)" in section, (entry.id, symptom)
    # only tags two entries share get a page
    tag_pages = {p for p in pages if p.startswith("tags/") and p != "tags/index.md"}
    counts: dict[str, int] = {}
    for entry in entries:
        for tag in entry.data["tags"]:
            counts[tag] = counts.get(tag, 0) + 1
    assert tag_pages == {f"tags/{t}.md" for t, n in counts.items() if n >= 2}


def test_the_pages_key_ignores_when_the_manifest_was_written(tmp_path: Path) -> None:
    from trainwreck.site.skipping import pages_key

    make_repo(tmp_path)
    out = tmp_path / "build" / "docs"
    record = {"id": "x", "status": "passed", "started": "2026-12-02T10:00:00+00:00"}
    at_ten = pages_key(tmp_path, out, {"generated": "2026-12-02T10:00:00", "notebooks": [record]})
    at_eleven = pages_key(tmp_path, out, {"generated": "2026-12-02T11:00", "notebooks": [record]})
    assert at_ten == at_eleven
    rerun = {**record, "started": "2026-12-02T11:00:00+00:00"}  # on the page: "reproduced on"
    assert pages_key(tmp_path, out, {"generated": "x", "notebooks": [rerun]}) != at_ten
