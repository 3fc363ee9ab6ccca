"""`trainwreck check` on malformed entries: every problem reported at its line, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainwreck.check import check_entries

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "check_cases"

# case file -> the (line, column, message fragment) of each error it must produce.
EXPECTED: dict[str, list[tuple[int, int, str]]] = {
    "alias-bomb": [(3, 4, "YAML aliases expand to more than 200,000 nodes")],
    "attr-list-symptom": [
        (14, 10, "symptoms[0].why: an attribute list '{: onclick=\"alert(1)\" }' is not allowed")
    ],
    # a browser reads "\\" as "/" in an http(s) URL: "/\\host" and "\\/host" leave the site
    "backslash-host-image": [
        (8, 10, "summary: a link to another host written as '/\\' (a browser reads '\\' as '/')")
    ],
    "backslash-host-link": [
        (9, 12, "mechanism: a link to another host written as '\\/' (a browser reads '\\' as '/')")
    ],
    "bad-date": [(50, 10, "created: '30/11/2026' is not a 'date'")],
    "bad-fence-language": [
        (36, 15, "code_examples[0].language: 'bash {onclick=alert(1)}' is not a language name")
    ],
    "bad-id-pattern": [
        (2, 5, "id: 'Bad_Pattern' does not match '^[a-z0-9]+(-[a-z0-9]+)*$' (Kebab-case"),
        (2, 5, "does not match the file name 'bad-id-pattern.yaml'"),
    ],
    "bad-reference-kind": [(46, 11, "references[0].kind: 'tweet' is not one of ['docs',")],
    "bad-url": [(45, 10, "references[0].url: 'htp//json-schema.org/draft' is not a well-formed")],
    "bad-yaml-syntax": [(7, 7, "YAML syntax error: while parsing a flow sequence")],
    "binary-bytes": [(7, 1, "binary file (NUL byte)")],
    "boolean-title": [(3, 8, "title: must be a string, not a boolean (YAML reads yes/no")],
    "dangling-related": [(48, 9, "related[0].id: related entry 'no-such-entry' does not exist")],
    "data-image-step": [(24, 9, "fix.primary.steps[0]: a link to a 'data:' URL is not allowed")],
    "duplicate-id": [
        (2, 5, "id 'base-entry' does not match the file name 'duplicate-id.yaml'"),
        (2, 5, "id 'base-entry' is also used by entries/base-entry.yaml"),
    ],
    "duplicate-key": [(8, 1, "severity: duplicate key 'severity' (first defined on line 5)")],
    "empty-file": [(1, 1, "empty document")],
    "empty-summary": [(8, 10, "summary: must not be empty")],
    "entity-javascript-link": [
        (49, 21, "reproduction.not_reproducible: a link to a 'javascript:' URL is not allowed")
    ],
    "enum-category": [(4, 11, "category: 'sadness' is not one of ['reliability',")],
    "enum-relation": [(49, 15, "related[0].relation: 'cousin-of' is not one of")],
    "enum-severity": [
        (5, 11, "severity: 'hi' is not one of ['low', 'medium', 'high', 'critical']")
    ],
    "enum-status": [(7, 9, "status: 'done' is not one of ['draft',")],
    "event-handler-title": [
        (3, 8, "title: an event handler attribute 'onerror' in <img> is not allowed")
    ],
    "id-mismatch": [(2, 5, "id: id 'something-else' does not match the file name")],
    "javascript-link": [(9, 12, "mechanism: a link to a 'javascript:' URL is not allowed")],
    "missing-mechanism": [(2, 1, "'mechanism' is required")],
    "missing-notebook": [(49, 13, "notebook notebooks/missing-notebook.ipynb does not exist")],
    "missing-schema-comment": [(1, 1, "first line must be '# yaml-language-server:")],
    "missing-symptom-why": [(13, 5, "symptoms[0]: 'why' is required")],
    "non-mutual-relation": [
        (49, 15, "'confused-with' base-entry must be mutual: entries/base-entry.yaml should list")
    ],
    "non-utf8": [(3, 19, "not valid UTF-8: byte 0xe1 at offset 94")],
    "quick-answer-mid-phrase": [
        (57, 15, "quick_answer: unbalanced '\"': the line ends mid-phrase")
    ],
    "raw-html-summary": [(8, 10, "summary: raw HTML <script> is not allowed in contributed text")],
    "reproduction-both": [(51, 3, "reproduction.not_reproducible: unknown property")],
    "self-related": [(48, 9, "related[0].id: an entry cannot relate to itself")],
    "tab-indentation": [(14, 1, "YAML is indented with spaces, not tabs")],
    "top-level-list": [(2, 1, "an entry must be a mapping of sections")],
    "two-documents": [(53, 1, "expected one YAML document, found several")],
    "unknown-facet-value": [
        (53, 20, "facets.symptom[1]: 'exploded' is not a known symptom; use one of: hang, crash,")
    ],
    "unknown-nested-property": [(23, 5, "fix.primary.notes: unknown property 'notes'")],
    "unknown-property": [(8, 1, "owner: unknown property 'owner'")],
    "unknown-rule": [
        (34, 11, "fingerprint.rules[0]: rule 'no-such-rule' does not exist in rules/")
    ],
    "url-ends-link-early": [
        (
            45,
            10,
            "'https://a.com/)<svg/onload=alert(1)//x>' is not a well-formed http(s) URL ('<' must",
        )
    ],
    "url-unbalanced-paren": [(45, 10, "is not a well-formed http(s) URL (unbalanced parentheses)")],
    "url-without-host": [(45, 10, "'https://localhost/page' is not a well-formed http(s) URL")],
    "wrong-type-symptoms": [(13, 3, "symptoms: must be an array, not a mapping")],
    "wrong-type-tags": [(6, 7, "tags: must be an array, not a string")],
    # hostile YAML: each is one located problem, never a traceback (issue 10)
    "yaml-deep-nesting": [(8, 206, "document nests deeper than 200 levels")],
    "yaml-huge-integer": [(8, 9, "budget: integer of 5,000 digits; the limit is 100")],
    "yaml-recursive-alias": [(8, 14, "alias *loop refers to a node that contains it")],
    "yaml-unknown-tag": [(8, 8, "unknown YAML tag '!foo'")],
    # names checked against the installed libraries (issue 26): each at its line and column
    "unknown-torch-name": [
        (39, 18, "torch.cuda.memory._snapshott does not exist in torch "),
    ],
    "misspelled-env-var": [
        (38, 14, "environment variable NCCL_IB_TIMEOUTT is unknown: not read by NCCL"),
        (39, 7, "environment variable TORCH_DISTRIBUTED_DEBUGG is unknown: not read by torch"),
    ],
    "unknown-keyword": [
        (38, 50, "transformers.TrainingArguments() has no keyword argument 'evaluation_strategy'")
    ],
    "unknown-config-key": [
        (40, 44, "'overlap_com' (in zero_optimization) is not a DeepSpeed config key in deepspeed")
    ],
    "unknown-allocator-option": [(37, 35, "'expandable_segment' is not an allocator option torch")],
    "example-does-not-compile": [(38, 23, "does not compile: '(' was never closed")],
    "fragment-not-marked": [
        (38, 11, "does not compile: 'continue' not properly in loop (lines from inside a loop")
    ],
    "runs-cpu-without-test": [
        (36, 11, "code_examples[0].runs: runs: cpu, but no test in tests/examples/test_runs_cpu_")
    ],
}
# Cases whose problem is an error only where the library they cite is installed (a warning
# elsewhere); they are skipped where it is not.
NEEDS = {
    "unknown-torch-name": "torch",
    "misspelled-env-var": "torch",
    "unknown-keyword": "transformers",
    "unknown-config-key": "deepspeed",
    "unknown-allocator-option": "torch",
}


def make_repo(tmp_path: Path, *cases: str) -> Path:
    """A scratch knowledge base: the schemas, the valid base entry and the named cases."""
    shutil.copytree(REPO / "schemas", tmp_path / "schemas")
    (tmp_path / "entries").mkdir()
    shutil.copy(CASES / "base-entry.yaml", tmp_path / "entries")
    for case in cases:
        shutil.copy(CASES / "malformed" / f"{case}.yaml", tmp_path / "entries")
    return tmp_path


def test_every_case_file_has_an_expectation() -> None:
    on_disk = {path.stem for path in (CASES / "malformed").glob("*.yaml")}
    assert on_disk == set(EXPECTED)
    assert len(on_disk) >= 25


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_malformed_entry_is_reported_at_its_line(tmp_path: Path, case: str) -> None:
    if case in NEEDS and importlib.util.find_spec(NEEDS[case]) is None:
        pytest.skip(f"{NEEDS[case]} is not installed")
    root = make_repo(tmp_path, case)
    problems, _ = check_entries(root, [root / "entries" / f"{case}.yaml"])
    located = [(p.line, p.column, str(p)) for p in problems]
    for line, column, fragment in EXPECTED[case]:
        assert any(
            (at_line, at_col) == (line, column) and fragment in text
            for at_line, at_col, text in located
        ), f"expected {line}:{column} '{fragment}' in {located}"
    for problem in problems:
        assert str(problem).startswith(f"entries/{case}.yaml:{problem.line}:{problem.column}: ")


def test_base_entry_is_clean(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    problems, checked = check_entries(root, [root / "entries" / "base-entry.yaml"])
    assert checked == 1
    assert problems == []


def test_all_problems_in_one_run_with_exit_code_1(tmp_path: Path) -> None:
    root = make_repo(tmp_path, *EXPECTED)
    result = run_cli("check", "--root", str(root))
    assert result.returncode == 1
    reported_files = {line.split(":", 1)[0] for line in result.stdout.splitlines()}
    # every malformed file is reported in the same run
    assert {f"entries/{case}.yaml" for case in EXPECTED} <= reported_files
    assert "Traceback" not in result.stderr


def test_json_format_lists_located_problems(tmp_path: Path) -> None:
    root = make_repo(tmp_path, "enum-severity", "duplicate-key")
    result = run_cli("check", "--root", str(root), "--format", "json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["checked"] == 3
    by_file = {(p["file"], p["line"], p["column"]): p for p in report["problems"]}
    assert by_file[("entries/enum-severity.yaml", 5, 11)]["path"] == "severity"
    assert by_file[("entries/duplicate-key.yaml", 8, 1)]["message"].startswith("duplicate key")


def test_huge_file_is_refused_without_parsing(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    huge = root / "entries" / "huge.yaml"
    with open(huge, "w") as handle:
        handle.write("faq:\n")
        for i in range(400_000):  # ~20 MB
            handle.write(f"  - q: question {i} {'x' * 30}\n")
    problems, _ = check_entries(root, [huge])
    assert [str(p) for p in problems] == [
        f"entries/huge.yaml:1:1: file is {huge.stat().st_size:,} bytes; the limit is 1,048,576 bytes"
    ]


def test_unquoted_dates_stay_strings(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    entry = root / "entries" / "base-entry.yaml"
    entry.write_text(entry.read_text().replace('"2026-11-30"', "2026-11-30"))
    problems, _ = check_entries(root, [entry])
    assert problems == []


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    result = run_cli("check", "--root", str(root), "entries/nope.yaml")
    assert result.returncode == 2
    assert result.stderr.strip() == "trainwreck check: no such file or folder: entries/nope.yaml"


def test_repository_entries_are_clean() -> None:
    if not list((REPO / "entries").glob("*.yaml")):
        pytest.skip("no entries yet")
    result = run_cli("check", "--root", str(REPO))
    assert result.returncode == 0, result.stdout + result.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainwreck", *args], capture_output=True, text=True, timeout=600
    )
