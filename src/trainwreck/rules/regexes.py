"""RE2 patterns: compiling with precise errors, and the literal prefilter.

Every pattern of every rule runs under RE2, whose matching time is linear in the input, so no
contributed rule can hang the engine. The engine does not run each pattern on each line: it first
finds candidate lines with one combined search for literals that any match must contain (the
"required literals" of each pattern, as in grep's and RE2's FilteredRE2 prefiltering), then runs
the real patterns on those lines only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import re2

from trainwreck.rules.regex_internals import parse as _python_parse
from trainwreck.rules.regex_internals import sre_constants as _sre_c

# Python's parser reads RE2-only syntax differently ([[:digit:]] as a class of ':', 'd'...,
# \pN, \C, \Q...\E): patterns holding any of it are not analysed.
_RE2_ONLY = ("[[:", "\\p", "\\P", "\\C", "\\Q")
MIN_LITERAL = 3
MAX_CHAIN = 3  # required literal sets chained in one prefilter alternative
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


@functools.lru_cache(maxsize=4096)
def _parse(pattern: str) -> Any:
    """Python's parse of a pattern, once per pattern (the literals and the digit analysis both
    read it). Raises what the parser raises."""
    return _python_parse(pattern)


def compile(pattern: str) -> Any:
    return re2.compile(pattern, options())


# --- what a pattern provably requires, worked out once ---------------------------------------


@dataclass(frozen=True)
class PatternFacts:
    """What the engine needs to know of a pattern before it reads a line: its required literals
    (literal_options) and whether it tells digits apart (digit_blind). Worked out from Python's
    parse of the pattern, once per pattern; a compiled bundle stores them (`pattern_facts`) so
    that diagnose does not parse its patterns again at every start."""

    literals: tuple[tuple[str, ...], ...]
    ignore_case: bool
    digit_blind: bool

    def to_json(self) -> list[Any]:
        return [[list(option) for option in self.literals], self.ignore_case, self.digit_blind]

    @classmethod
    def from_json(cls, data: Any) -> PatternFacts:
        literals, ignore_case, blind = data
        if not (isinstance(ignore_case, bool) and isinstance(blind, bool)):
            raise ValueError("not pattern facts")
        options = tuple(tuple(str(x) for x in option) for option in literals)
        return cls(options, ignore_case, blind)


_FACTS: dict[str, PatternFacts] = {}
MAX_FACTS = 16_384  # patterns remembered (all of any rule set's, a few MiB at most)


def facts(pattern: str) -> PatternFacts:
    """The facts of `pattern`: remembered, else worked out (and remembered)."""
    found = _FACTS.get(pattern)
    if found is None:
        options, ignore_case = _literal_options(pattern)
        found = PatternFacts(
            tuple(tuple(option) for option in options), ignore_case, _digit_blind(pattern)
        )
        if len(_FACTS) < MAX_FACTS:
            _FACTS[pattern] = found
    return found


def facts_table(patterns: Iterable[str]) -> dict[str, list[Any]]:
    """The facts of every pattern, as a bundle stores them."""
    return {pattern: facts(pattern).to_json() for pattern in sorted(set(patterns))}


def learn(table: Any) -> None:
    """Remember the facts a bundle stores (written by this version of the toolkit: the analysis
    may change between versions). A malformed item is left out: it is worked out again."""
    if not isinstance(table, dict):
        return
    for pattern, data in table.items():
        if isinstance(pattern, str) and pattern not in _FACTS and len(_FACTS) < MAX_FACTS:
            try:
                _FACTS[pattern] = PatternFacts.from_json(data)
            except (TypeError, ValueError):
                continue


# --- required literals -------------------------------------------------------------------------


def literal_options(pattern: str) -> tuple[list[list[str]], bool]:
    """Every provable required-literal set of `pattern`: each set is alternatives, one of which
    any match contains. Also whether they compare case-insensitively. Sets whose shortest
    alternative is under MIN_LITERAL characters are dropped."""
    found = facts(pattern)
    return [list(option) for option in found.literals], found.ignore_case


def _literal_options(pattern: str) -> tuple[list[list[str]], bool]:
    # A wrong literal would make the prefilter drop lines; '.' under (?s) and lazy-by-default
    # (?U) change what a literal run means.
    if any(token in pattern for token in (*_RE2_ONLY, "(?U", "(?s")):
        return [], False
    try:
        parsed = _parse(pattern)
    except Exception:
        return [], False
    ignore_case = bool(parsed.state.flags & _sre_c.SRE_FLAG_IGNORECASE) or "(?i" in pattern
    options = [sorted(set(found)) for found in _seq(list(parsed)) if _score(found) >= MIN_LITERAL]
    unique: list[list[str]] = []
    for option in options:
        if option not in unique:
            unique.append(option)
    return unique, ignore_case


def required_literals(pattern: str) -> tuple[list[str], bool] | None:
    """The longest required-literal set (see literal_options), or None."""
    options, ignore_case = literal_options(pattern)
    if not options:
        return None
    return max(options, key=_score), ignore_case


def choose_literals(pattern: str, sample: bytes) -> tuple[list[str], bool] | None:
    """The required-literal set that is rarest in `sample` (a block of the log being read), so
    the prefilter lets through as few lines as it can prove necessary."""
    options, ignore_case = literal_options(pattern)
    if not options:
        return None
    haystack = sample.lower() if ignore_case else sample

    def cost(option: list[str]) -> tuple[int, int]:
        hits = sum(haystack.count((x.lower() if ignore_case else x).encode()) for x in option)
        return hits, -_score(option)

    return min(options, key=cost), ignore_case


def _score(alternatives: list[str] | None) -> int:
    return min((len(x) for x in alternatives), default=0) if alternatives else 0


def _seq(items: list[Any]) -> list[list[str]]:
    """Required-literal sets of a sequence of parsed regex items (each set: alternatives)."""
    found: list[list[str]] = []
    run: list[str] = []

    def close_run() -> None:
        nonlocal run
        if run:
            found.append(["".join(run)])
        run = []

    for op, arg in items:
        if op is _sre_c.LITERAL:
            run.append(chr(arg))
            continue
        close_run()
        if op is _sre_c.SUBPATTERN:
            # (group, add_flags, del_flags, pattern); a case-insensitive group is handled by the
            # caller through the pattern-wide ignore_case flag.
            found.extend(_seq(list(arg[-1])))
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT):
            low, _high, sub = arg
            if low >= 1:
                found.extend(_seq(list(sub)))
        elif op is _sre_c.BRANCH:
            alternatives: list[str] = []
            for branch in arg[1]:
                got = _seq(list(branch))
                if not got:
                    alternatives = []
                    break
                alternatives.extend(max(got, key=_score))
            if alternatives:
                found.append(alternatives)
    close_run()
    return found


class SampleCounts:
    """How often literals occur in a sample of the input, each literal counted once (several
    patterns share literals) and the sample lowered once for the case-insensitive ones."""

    def __init__(self, sample: bytes):
        self.sample = sample
        self._lower: bytes | None = None
        self._seen: dict[tuple[str, bool], int] = {}

    def __call__(self, literal: str, ignore_case: bool) -> int:
        key = (literal, ignore_case)
        found = self._seen.get(key)
        if found is None:
            if ignore_case:
                if self._lower is None:
                    self._lower = self.sample.lower()
                found = self._lower.count(literal.lower().encode())
            else:
                found = self.sample.count(literal.encode())
            self._seen[key] = found
        return found


def prefilter_pattern(pattern: str, sample: bytes | SampleCounts | None = None) -> str:
    """A pattern that finds every line `pattern` can match, as cheaply as we can prove.

    Every match contains the required literal sets of `pattern` in order, on one line, so the
    prefilter chains them ('loss.*?(?:nan|inf)'); a chain is far more selective than its rarest
    link. Without provable literals it is the pattern itself, unanchored at line start (the
    engine strips rank prefixes before the real match, so '^' may follow a prefix)."""
    options, ignore_case = literal_options(pattern)
    if not options:
        return _drop_line_anchors(pattern)
    if sample is not None and len(options) > MAX_CHAIN:
        # Keep the rarest links (in their original order).
        count = sample if isinstance(sample, SampleCounts) else SampleCounts(sample)
        rarity = sorted(
            range(len(options)),
            key=lambda i: (
                sum(count(x, ignore_case) for x in options[i]),
                -_score(options[i]),
            ),
        )
        keep = sorted(rarity[:MAX_CHAIN])
        options = [options[i] for i in keep]
    elif len(options) > MAX_CHAIN:
        longest = sorted(range(len(options)), key=lambda i: -_score(options[i]))[:MAX_CHAIN]
        options = [options[i] for i in sorted(longest)]  # a chain keeps the pattern's order
    return literal_chain(options, ignore_case)


def literal_chain(
    options: list[list[str]], ignore_case: bool, literal: Callable[[str], str] = str
) -> str:
    """An RE2 search for required-literal sets in order on one line ('loss.*?(?:nan|inf)'),
    each literal first passed through `literal` (shapes.py masks their digits)."""
    links = ["(?:" + "|".join(re2.escape(literal(x)) for x in option) + ")" for option in options]
    body = ".*?".join(links)
    return f"(?i:{body})" if ignore_case else body


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


# --- digit-blind patterns ----------------------------------------------------------------------

_DIGITS = frozenset(range(0x30, 0x3A))
# (the parse names \d, \w, \s and their negations this way; the engine's Unicode variants
# are chosen when compiling)
_ALL_DIGIT_CATEGORIES = {_sre_c.CATEGORY_DIGIT, _sre_c.CATEGORY_WORD, _sre_c.CATEGORY_NOT_SPACE}
_NO_DIGIT_CATEGORIES = {_sre_c.CATEGORY_NOT_DIGIT, _sre_c.CATEGORY_NOT_WORD, _sre_c.CATEGORY_SPACE}


def digit_blind(pattern: str) -> bool:
    """Whether `pattern` cannot tell one ASCII digit from another: no literal digit, and every
    character class holds all ten digits or none. Such a pattern matches a line exactly when it
    matches the line with every digit turned into '0', with the same group spans (its automaton
    moves alike on every digit), which is what lets the engine reuse one line's matches for every
    line of the same shape (shapes.py). False whenever it cannot be proven."""
    return facts(pattern).digit_blind


def _digit_blind(pattern: str) -> bool:
    if any(token in pattern for token in _RE2_ONLY):
        return False
    try:
        parsed = _parse(pattern)
    except Exception:  # RE2-only syntax Python refuses (\x{30}, \z): not analysed
        return False
    return _blind(list(parsed))


def _blind(items: list[Any]) -> bool:
    for op, arg in items:
        if op in (_sre_c.LITERAL, _sre_c.NOT_LITERAL):
            if arg in _DIGITS:
                return False
        elif op is _sre_c.IN:
            covered = _class_digits(arg)
            if covered is None or covered not in (frozenset(), _DIGITS):
                return False
        elif op is _sre_c.SUBPATTERN:
            if not _blind(list(arg[-1])):
                return False
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT):
            if not _blind(list(arg[2])):
                return False
        elif op is _sre_c.BRANCH:
            if not all(_blind(list(branch)) for branch in arg[1]):
                return False
        elif op not in (_sre_c.ANY, _sre_c.AT):
            return False  # anything else (lookarounds, backreferences) is not analysed
    return True


def _class_digits(items: list[Any]) -> frozenset[int] | None:
    """The ASCII digits a character class matches (None when it cannot be told)."""
    covered: set[int] = set()
    negate = False
    for op, arg in items:
        if op is _sre_c.NEGATE:
            negate = True
        elif op is _sre_c.LITERAL:
            if arg in _DIGITS:
                covered.add(arg)
        elif op is _sre_c.RANGE:
            low, high = arg
            covered.update(d for d in _DIGITS if low <= d <= high)
        elif op is _sre_c.CATEGORY:
            if arg in _ALL_DIGIT_CATEGORIES:
                covered.update(_DIGITS)
            elif arg not in _NO_DIGIT_CATEGORIES:
                return None
        else:
            return None
    found = frozenset(covered)
    return _DIGITS - found if negate else found
