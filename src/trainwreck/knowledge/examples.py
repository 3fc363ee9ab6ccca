"""Code examples that compile, and those that claim to run on a CPU have a test that runs them.

Every Python `code` of an entry (code examples, confirm items, fix steps) is compiled; a
SyntaxError is a problem at its line in the YAML. What the code is, is said by its `runs`:

- `cpu`: a complete example that runs on a CPU; a test in tests/examples/test_<entry_id>.py must
  run it (it names the example by its place, `example(ENTRY, "code_examples[0]")`), and check
  reports one without;
- `gpu`: complete, but it needs a CUDA GPU (recordings/ runs them on a GPU host);
- `fragment`: lines that need the reader's model, data or loop around them; compiled as the body
  of a loop inside a function, so `break`, `continue`, `return` and `await` are allowed.

Without `runs` the code must compile as a module. The tests themselves are not imported here:
which examples they run is read from their source.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

from trainwreck.knowledge.citations import PYTHON_LANGUAGES, CodeBlock, code_blocks
from trainwreck.knowledge.names import offset_position
from trainwreck.knowledge.pycode import FRAGMENT_LINES, as_fragment
from trainwreck.model import Entry, Problem, format_path

EXAMPLE_TESTS = Path("tests") / "examples"
# Where an example sits in its entry, as tests name it.
LOCATION = re.compile(
    r"^(?:code_examples|confirm|fix\.(?:primary|fallback|emergency)\.steps|fix\.verify)\[\d+\]$"
)


def example_tests_path(root: Path, entry_id: str) -> Path:
    """tests/examples/test_<entry_id>.py, where the tests of an entry's examples live."""
    return root / EXAMPLE_TESTS / f"test_{entry_id.replace('-', '_')}.py"


def location(block: CodeBlock) -> str:
    """The place of a code block as tests name it: code_examples[0] for its code at
    ("code_examples", 0, "code")."""
    return format_path(block.path[:-1])


def covered_locations(path: Path) -> set[str]:
    """The examples a test file runs: the string arguments of its `example(...)` calls that
    name a place in an entry."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name != "example":
            continue
        for arg in node.args:
            if (
                isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and LOCATION.match(arg.value)
            ):
                found.add(arg.value)
    return found


def example_problems(entries: Iterable[Entry], root: Path) -> list[Problem]:
    problems: list[Problem] = []
    for entry in entries:
        lines: list[str] | None = None
        covered: set[str] | None = None
        for block in code_blocks(entry.data):
            if block.language in PYTHON_LANGUAGES:
                failure = compile_failure(block.code, block.runs)
                if failure:
                    if lines is None:
                        lines = entry.path.read_text(
                            encoding="utf-8", errors="replace"
                        ).splitlines()
                    offset, message, severity = failure
                    line, column = entry.document.position(block.path)
                    line, column = offset_position(lines, line, column, offset)
                    problems.append(
                        Problem(
                            entry.document.file,
                            line,
                            column,
                            format_path(block.path),
                            message,
                            severity,
                        )
                    )
            if block.runs == "cpu":
                if covered is None:
                    covered = covered_locations(example_tests_path(root, entry.id))
                if location(block) not in covered:
                    test = example_tests_path(root, entry.id).relative_to(root)
                    problems.append(
                        entry.document.problem(
                            (*block.path[:-1], "runs"),
                            f"runs: cpu, but no test in {test} runs {location(block)} "
                            "(add one, or mark it gpu or fragment; docs/contributing.md)",
                        )
                    )
    return problems


def compile_failure(code: str, runs: str | None) -> tuple[int, str, str] | None:
    """(offset in the code, message, severity) when the code does not compile as what `runs`
    says it is (a SyntaxWarning is a warning), else None."""
    fragment = runs == "fragment"
    source = as_fragment(code) if fragment else code
    shift = FRAGMENT_LINES if fragment else 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compile(source, "<example>", "exec", dont_inherit=True)
        except SyntaxError as exc:
            hint = ""
            if not fragment and re.search(
                r"outside (?:loop|function)|not properly in loop", exc.msg
            ):
                hint = " (lines from inside a loop or function: mark them runs: fragment)"
            offset = _offset(code, exc.lineno, exc.offset, shift)
            return offset, f"does not compile: {exc.msg}{hint}", "error"
        except ValueError as exc:  # NUL bytes and the like
            return 0, f"does not compile: {exc}", "error"
    for warning in caught:
        if issubclass(warning.category, SyntaxWarning):
            offset = _offset(code, warning.lineno, 1, shift)
            return offset, f"compiles with a warning: {warning.message}", "warning"
    return None


def _offset(code: str, lineno: int | None, column: int | None, shift: int) -> int:
    lines = code.splitlines(True)
    line = max((lineno or 1) - 1 - shift, 0)
    if line >= len(lines):
        return max(len(code) - 1, 0)
    col = max((column or 1) - 1 - (2 if shift else 0), 0)
    return sum(len(text) for text in lines[:line]) + min(col, len(lines[line]))
