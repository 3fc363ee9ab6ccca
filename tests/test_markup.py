"""Markup in contributed text: what check and compile refuse, and what they leave alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainwreck.compile.command import compile_rules
from trainwreck.markup import markup_findings, url_problem

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "finding"),
    [
        ("a <script>x</script> b", "raw HTML <script>"),
        ("a </div> b", "raw HTML </div>"),
        ("<IMG SRC=x OnError=alert(1)>", "an event handler attribute 'onerror' in <IMG>"),
        ("<foo onclick=x>", "an event handler attribute 'onclick' in <foo>"),
        ("<!-- hidden -->", "raw HTML '<!--'"),
        ("[x](javascript:alert(1))", "a link to a 'javascript:' URL"),
        ("[x]( java\tscript:alert(1))", "a link to a 'javascript:' URL"),
        ("[x](&#106;avascript:alert(1))", "a link to a 'javascript:' URL"),
        ("![x](data:image/svg+xml,<svg/onload=x>)", "a link to a 'data:' URL"),
        ("[x]: vbscript:msgbox", "a link to a 'vbscript:' URL"),
        ("<javascript:alert(1)>", "a link to a 'javascript:' URL"),
        ("text {: onclick='x' }", "an attribute list '{: onclick='x' }'"),
        ("text { .big #top }", "an attribute list '{ .big #top }'"),
    ],
)
def test_markup_is_found(text: str, finding: str) -> None:
    assert finding in markup_findings(text)


@pytest.mark.parametrize(
    "text",
    [
        "prints <file>.cu:<line>: <kernel>: Assertion `<cond>` failed",  # placeholders are text
        "unable to write to file </torch_123>",
        "t >= 0 && t < n_classes",
        "the `<script>` tag, `{: onclick=x}` and ```<b>``` in code spans",
        "```html\n<script>x</script>\n```",
        "see [docs](https://docs.python.org/3/) or [a page](../other/index.md) or mail [us](mailto:a@b.c)",
        "saves `{'model', 'optim'}` every {R} steps as probe-rank{R}.jsonl",
    ],
)
def test_text_that_is_not_markup_passes(text: str) -> None:
    assert markup_findings(text) == []


def test_url_format() -> None:
    assert url_problem("https://en.wikipedia.org/wiki/Straggler_(computing)") is None
    assert url_problem("https://a.com/x?y=1&z=%20#f") is None
    assert "'<' must be %-encoded" in (url_problem("https://a.com/)<svg/onload=x//x>") or "")
    assert "unbalanced parentheses" in (url_problem("https://a.com/x)") or "")
    assert "' ' must be %-encoded" in (url_problem("https://a.com/a b") or "")
    assert url_problem("javascript://a.com/%0aalert(1)") is not None
    assert url_problem("https://localhost/x") is not None


def test_compile_reports_markup_in_rule_text(tmp_path: Path) -> None:
    from tests.browser.fixture_repo import RULE, make_repo

    root = make_repo(tmp_path / "repo")
    rule = RULE.replace(
        "title: Step time spikes on every rank",
        "title: Step time <img src=x onerror=alert(1)> spikes",
    ).replace(
        "description: Recurring",
        "description: See [this](javascript:alert(1)). Recurring",
    )
    (root / "rules/demo-straggler-steps.yaml").write_text(rule)
    bundle, problems = compile_rules(root, run_tests=False)
    assert bundle is None
    located = [str(p) for p in problems]
    assert any(
        text.startswith("rules/demo-straggler-steps.yaml:4:8: title: an event handler attribute")
        for text in located
    ), located
    assert any(
        text.startswith(
            "rules/demo-straggler-steps.yaml:5:14: description: a link to a 'javascript:'"
        )
        for text in located
    ), located
    shutil.rmtree(root)


def test_check_reports_markup_in_notebook_markdown_cells(tmp_path: Path) -> None:
    import json

    from tests.browser.fixture_repo import make_repo, notebook
    from trainwreck.check import check_entries

    root = make_repo(tmp_path / "repo")
    data = notebook()
    data["cells"][3]["source"] = (
        "## Before and after\n\n<img src=x onerror=alert(1)> [x](javascript:y)"
    )
    text = json.dumps(data, indent=1)
    (root / "notebooks/demo-straggler.ipynb").write_text(text)
    problems, _ = check_entries(root, [root / "entries/demo-straggler.yaml"])
    line = text[: text.index('"cell_type": "markdown"', text.index('"cell-2"'))].count("\n") + 1
    found = sorted(str(p) for p in problems if p.file == "notebooks/demo-straggler.ipynb")
    assert found == [
        f"notebooks/demo-straggler.ipynb:{line}:4: cells[3]: a link to a 'javascript:' URL is not "
        "allowed in a markdown cell (links are http(s), mailto or relative)",
        f"notebooks/demo-straggler.ipynb:{line}:4: cells[3]: an event handler attribute 'onerror' "
        "in <img> is not allowed in a markdown cell",
    ], found
