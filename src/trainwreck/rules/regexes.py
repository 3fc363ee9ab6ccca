"""RE2 patterns: compiling with precise errors, and the literal prefilter.

Every pattern of every rule runs under RE2, whose matching time is linear in the input, so no
contributed rule can hang the engine. The engine does not run each pattern on each line: it first
finds candidate lines with one combined search for literals that any match must contain (the
"required literals" of each pattern, as in grep's and RE2's FilteredRE2 prefiltering), then runs
the real patterns on those lines only.
"""

from __future__ import annotations

import re
from typing import Any

import re2

try:  # Python 3.11+
    import re._constants as _sre_c
    import re._parser as _sre_p
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_p  # type: ignore[no-redef]

MIN_LITERAL = 3
MAX_PROGRAM = 20_000  # RE2 program size above which a pattern is refused as too large

_UNSUPPORTED = [
    (re.compile(r"\(\?<?[=!]"), "lookaround ((?=, (?!, (?<=, (?<!) is not supported by RE2"),
    (re.compile(r"\(\?>"), "atomic groups (?>...) are not supported by RE2"),
    (re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]"), "backreferences (\\1) are not supported by RE2"),
    (re.compile(r"\(\?P=\w+\)"), "backreferences (?P=name) are not supported by RE2"),
    (re.compile(r"(?<!\\)(?:\\\\)*\\Z"), "use \\z instead of \\Z (RE2 syntax)"),
    (re.compile(r"[*+?}][+]"), "possessive quantifiers are not supported by RE2"),
]


def options() -> re2.Options:
    opts = re2.Options()
    opts.max_mem = 64 << 20
    opts.log_errors = False
    return opts


def compile_error(pattern: str) -> tuple[int, str] | None:
    """(offset in the pattern, message) when RE2 cannot run `pattern`, else None."""
    if not isinstance(pattern, str):
        return 0, "a pattern must be a string"
    for finder, message in _UNSUPPORTED:
        hit = finder.search(pattern)
        if hit:
            return hit.start(), message
    try:
        compiled = re2.compile(pattern, options())
    except Exception as exc:  # re2.error, or pybind errors for odd input
        return 0, f"RE2 cannot compile this pattern: {_error_text(exc)}"
    if compiled.programsize > MAX_PROGRAM:
        return (
            0,
            f"pattern is too large for RE2 (program size {compiled.programsize} > {MAX_PROGRAM}); simplify the repetitions",
        )
    if not pattern.strip():
        return 0, "empty pattern"
    return None


def _error_text(exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    if text.startswith(("b'", 'b"')) and text.endswith(("'", '"')):
        text = text[2:-1]
    return text


def group_names(pattern: str) -> list[str]:
    try:
        return list(re2.compile(pattern, options()).groupindex)
    except Exception:
        return []


def compile(pattern: str) -> Any:
    return re2.compile(pattern, options())


# --- required literals -------------------------------------------------------------------------


def required_literals(pattern: str) -> tuple[list[str], bool] | None:
    """Alternatives, one of which every match of `pattern` contains, and whether they compare
    case-insensitively. None when no usable literal (>= MIN_LITERAL characters) can be proven."""
    # Python's parser reads RE2-only syntax differently ([[:digit:]], \pN, \C, \Q...\E): a
    # wrong literal would make the prefilter drop lines, so such patterns are not analysed.
    if any(token in pattern for token in ("[[:", "\\p", "\\P", "\\C", "\\Q", "(?U", "(?s")):
        return None
    try:
        parsed = _sre_p.parse(pattern)
    except Exception:
        return None
    ignore_case = bool(parsed.state.flags & _sre_c.SRE_FLAG_IGNORECASE) or "(?i" in pattern
    found = _seq(list(parsed))
    if not found or min(len(x) for x in found) < MIN_LITERAL:
        return None
    return sorted(set(found)), ignore_case


def _score(alternatives: list[str] | None) -> int:
    return min((len(x) for x in alternatives), default=0) if alternatives else 0


def _seq(items: list[Any]) -> list[str] | None:
    """Best required-literal set of a sequence of parsed regex items."""
    best: list[str] | None = None
    run: list[str] = []

    def close_run() -> None:
        nonlocal best, run
        if run:
            candidate = ["".join(run)]
            if _score(candidate) > _score(best):
                best = candidate
        run = []

    for op, arg in items:
        if op is _sre_c.LITERAL:
            run.append(chr(arg))
            continue
        close_run()
        inner: list[str] | None = None
        if op is _sre_c.SUBPATTERN:
            # (group, add_flags, del_flags, pattern); a case-insensitive group is handled by the
            # caller through the pattern-wide ignore_case flag.
            inner = _seq(list(arg[-1]))
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT):
            low, _high, sub = arg
            if low >= 1:
                inner = _seq(list(sub))
        elif op is _sre_c.BRANCH:
            alternatives: list[str] = []
            for branch in arg[1]:
                got = _seq(list(branch))
                if not got:
                    alternatives = []
                    break
                alternatives.extend(got)
            inner = alternatives or None
        if inner and _score(inner) > _score(best):
            best = inner
    close_run()
    return best


def prefilter_pattern(pattern: str) -> str:
    """A pattern that finds every line `pattern` can match, as cheaply as we can prove.

    Required literals when they exist; otherwise the pattern itself, unanchored at line start
    (the engine strips rank prefixes before the real match, so '^' may follow a prefix)."""
    literals = required_literals(pattern)
    if literals:
        alternatives, ignore_case = literals
        body = "|".join(re2.escape(x) for x in alternatives)
        return f"(?i:{body})" if ignore_case else body
    return _drop_line_anchors(pattern)


def _drop_line_anchors(pattern: str) -> str:
    """Remove '^' anchors (outside character classes) so the pattern finds prefixed lines too."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            out.append(ch)
        elif ch == "[":
            in_class = True
            if i + 1 < n and pattern[i + 1] == "^":
                out.append("[^")
                i += 2
                continue
            out.append(ch)
        elif ch == "^":
            out.append("(?:)")
        else:
            out.append(ch)
        i += 1
    return "".join(out)
