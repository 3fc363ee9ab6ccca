"""Rule examples: every rule records the wordings it recognises with their provenance, and
`trainwreck compile` checks each one against the rule (and the site lists them)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.test_compile_cli import make_repo
from trainwreck.cli import main
from trainwreck.site import Rule, render_rule

ROOT = Path(__file__).resolve().parents[1]


def test_every_rule_carries_sourced_examples():
    without = set()
    for path in sorted((ROOT / "rules").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        examples = data.get("examples") or []
        if not examples:
            without.add(path.stem)
        for example in examples:
            for key in ("text", "library", "versions", "source"):
                assert str(example.get(key, "")).strip(), f"{path.name}: example without {key}"
    assert not without, f"rules without examples: {sorted(without)}"


def add_examples(repo: Path, block: str) -> None:
    rule = repo / "rules" / "demo-boom.yaml"
    rule.write_text(rule.read_text() + block)


def test_compile_checks_each_example(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    add_examples(
        repo,
        "examples:\n"
        "- text: 'DemoError: widget exploded after 2 s'\n"
        "  library: demo\n  versions: '>=1.0'\n  source: demo/errors.py\n"
        "- text: 'DemoError: widget exploded after 5 ms'\n"
        "  library: demo\n  versions: '>=1.0'\n  source: demo/errors.py\n"
        "- text: 'DemoError: widget went missing'\n"
        "  library: demo\n  versions: '0.9'\n  source: demo/errors.py\n  fires: false\n",
    )
    assert main(["compile", "--root", str(repo), "--no-wheel"]) == 1
    err = capsys.readouterr().err
    # The second is recognised but below the condition's threshold; the third not at all.
    assert "rules/demo-boom.yaml:20:9: examples[1].text: rule does not fire on this example" in err
    assert (
        "rules/demo-boom.yaml:24:9: examples[2].text: example is not recognised by any matcher"
        in err
    )
    assert "examples[0]" not in err


def test_example_naming_an_unknown_matcher_is_an_error(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    add_examples(
        repo,
        "examples:\n- text: 'DemoError: widget exploded after 2 s'\n"
        "  library: demo\n  versions: '>=1.0'\n  source: demo/errors.py\n  matcher: bang\n",
    )
    assert main(["compile", "--root", str(repo), "--no-wheel", "--no-tests"]) == 1
    assert (
        "rules/demo-boom.yaml:20:12: examples[0].matcher: unknown matcher 'bang'"
        in capsys.readouterr().err
    )


def test_rule_page_lists_what_it_recognises_and_since_when():
    path = ROOT / "rules" / "nccl-error-backend.yaml"
    text = path.read_text(encoding="utf-8")
    page = render_rule(
        Rule("nccl-error-backend", "rules/nccl-error-backend.yaml", yaml.safe_load(text), text)
    )
    assert "| Wording | Printed by | Versions | Source |" in page
    assert "NCCL WARN socketProgress: Connection closed by remote peer" in page
    row = next(line for line in page.splitlines() if "socketProgress: Connection closed" in line)
    # library, versions and source follow the wording (escaped as contributed text)
    plain = row.replace("\\", "")
    assert (
        "| nccl | &gt;=2.16 (2.12-2.15 print &quot;Net : Connection closed by remote peer&quot;) |"
        in plain
    )
    assert plain.endswith("| src/misc/socket.cc (socketProgress) |")
