"""RE2 patterns: rejection of what RE2 cannot run, and the prefilter's soundness (it never drops a
line that a pattern matches)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import re2

from trainwreck.rules import regex_internals, regexes

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(a+)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"foo(?!bar)", "lookaround"),
        (r"(?<=a)b", "lookaround"),
        (r"(?<!a)b", "lookaround"),
        (r"(?>ab)", "atomic"),
        (r"a++", "possessive"),
        (r"end\Z", "\\z"),
        (r"(a", "RE2 cannot compile"),
        (r"a{2,100000}", "RE2 cannot compile"),
    ],
)
def test_unsupported_patterns_are_rejected(pattern, message):
    error = regexes.compile_error(pattern)
    assert error is not None and message in error[1]


@pytest.mark.parametrize("pattern", [r"(x+x+)+y", r"(a|aa)+$", r"(\w+\s?)+$", r"^(a+)+b"])
def test_catastrophic_backtracking_shapes_compile_and_run_linearly(pattern):
    # Exponential in a backtracking engine; RE2 runs them in linear time.
    assert regexes.compile_error(pattern) is None
    text = "x" * 50_000 + "!"
    assert regexes.compile(pattern).search(text) is None or True


def test_required_literals():
    literals, _ignore_case = regexes.required_literals(
        r"iteration\s+\d+ \|.*elapsed time per iteration \(ms\): "
    )
    assert literals == [" |"] or "elapsed time per iteration (ms): " in literals
    options, _ = regexes.literal_options(r"(?i)loss\s*[:=]\s*(nan|inf)")
    assert ["loss"] in options and ["inf", "nan"] in options
    assert regexes.literal_options(r"[[:digit:]]+ms")[0] == []  # RE2-only syntax: not analysed
    assert regexes.literal_options(r"\d+")[0] == []


def test_prefilter_prefers_rare_literals_and_chains_them():
    pattern = r"(?i)loss\s*[:=]\s*(?P<v>nan|inf)"
    sample = b"NCCL INFO x\n" * 100 + b"loss = 2.3\n" * 10
    prefilter = regexes.prefilter_pattern(pattern, sample)
    assert prefilter.startswith("(?i:") and ".*?" in prefilter


def _all_patterns() -> list[str]:
    patterns = [
        r"^Traceback \(most recent call last\):",
        r"(?:CUDA|HIP) out of memory\. Tried to allocate (?P<req>[\d.]+) (?P<u>[KMG]iB)",
        r"(?i)\b(?:step|iter)[\s:=#]+(?P<step>\d+)\b.*?\bstep[ _]time\b[\s:=]+(?P<ms>\d+)",
        r"a(bc|bd)e",
        r"foo(bar)?baz",
        r"x(yz)+w",
        r"^$",
        r"[^a]bc",
        r"(?i)NaN|inf",
    ]
    bundle = ROOT / "rules"
    if bundle.is_dir():
        import yaml

        for path in sorted(bundle.glob("*.yaml")):
            try:
                data = yaml.safe_load(path.read_text())
            except Exception:
                continue
            for spec in (data or {}).get("matchers", {}).values():
                if not isinstance(spec, dict):
                    continue
                if isinstance(spec.get("regex"), str):
                    patterns.append(spec["regex"])
                block = spec.get("block") or {}
                patterns.extend(
                    p for p in (block.get("start"), block.get("end")) if isinstance(p, str)
                )
    return [p for p in patterns if regexes.compile_error(p) is None]


def _mutations(pattern: str, rng: random.Random) -> list[str]:
    """Lines that a pattern may match: strings generated from its literals plus noise."""
    options, _ = regexes.literal_options(pattern)
    words = [x for option in options for x in option] or ["x"]
    lines = []
    for _ in range(30):
        parts = rng.sample(words, k=min(len(words), rng.randint(1, 3)))
        noise = rng.choice(["", " 12 ", " = ", ": 3.5 ms ", "[rank0]: ", "NaN", "\t", " step 5 "])
        lines.append(noise.join(parts) + rng.choice(["", " 42", " ms"]))
    return lines


def test_prefilter_never_drops_a_matching_line():
    """Soundness: for every pattern (the rules' and hand-picked ones), any line the pattern matches
    is also found by its prefilter, whatever sample picked the literals."""
    rng = random.Random(7)
    sample = b"NCCL INFO step loss time iteration\n" * 50
    lines_tested = 0
    for pattern in _all_patterns():
        compiled = re2.compile(pattern)
        prefilter = re2.compile("(?m)" + regexes.prefilter_pattern(pattern, sample))
        plain = re2.compile("(?m)" + regexes.prefilter_pattern(pattern))
        for line in [*_mutations(pattern, rng), json.dumps({"event": "gc"})]:
            if compiled.search(line):
                lines_tested += 1
                assert prefilter.search(line), (pattern, line)
                assert plain.search(line), (pattern, line)
    assert lines_tested > 10


def test_prefilter_finds_every_matching_line_of_the_regression_logs():
    """Soundness on real-shaped lines: every line of tests/logs that a rule pattern matches (after
    the paste-shape prefixes are removed) is a prefilter candidate."""
    import gzip

    from trainwreck.engine import prefixes

    logs = ROOT / "tests" / "logs"
    patterns = _all_patterns()
    files = [p for p in sorted(logs.rglob("*")) if p.is_file()]
    checked = 0
    matcher = re2.Set.SearchSet(regexes.options())
    for pattern in patterns:
        matcher.Add(pattern)
    matcher.Compile()
    prefilters = [re2.compile("(?m)" + regexes.prefilter_pattern(p)) for p in patterns]
    for path in files:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for line in raw.splitlines():
            body = prefixes.split_prefix(line)[1]
            for index in matcher.Match(body) or []:
                checked += 1
                assert prefilters[index].search(line), (patterns[index], path.name, line[:200])
    assert checked > 50


# Digit-blind patterns (shapes.py reuses a line's matches for every line of its shape).
DIGIT_BLIND = [
    (r"step time (?P<ms>[\d.]+) ms", True),
    (r"(?i)\brank\s*[=:]\s*(\d+)", True),
    (r"sm_\d+|\w+ \S+", True),
    (r"[^0-9]x[+-9]", True),  # classes holding all ten digits or none
    (r"Xid 79", False),  # a literal digit
    (r"retries: (?P<n>[1-9]\d*)", False),  # a class holding some digits
    (r"[^5]", False),
    (r"a\x30", False),  # a digit written as an escape
    (r"[[:digit:]]", False),  # RE2-only syntax Python's parser reads otherwise: not analysed
    (r"\pN+", False),
    (r"\Qa1\E", False),
]


@pytest.mark.parametrize(("pattern", "blind"), DIGIT_BLIND)
def test_digit_blind(pattern, blind):
    assert regexes.digit_blind(pattern) is blind


def test_digit_blind_patterns_match_masked_lines_alike():
    """The property the shapes rely on, checked on every rule pattern: on random lines built
    from the pattern's own words and digits, a digit-blind pattern's spans are the same with
    every digit turned into '0'."""
    from trainwreck.compile.packs import compile_folder
    from trainwreck.engine import patterns as pat
    from trainwreck.engine.shapes import MASK
    from trainwreck.rules.rule import Rule

    rules = [Rule.from_dict(rule) for rule in compile_folder(ROOT)[0].rules]
    found = [p for p in pat.compile_patterns(rules).patterns if regexes.digit_blind(p)]
    assert len(found) > 200
    rng = random.Random(7)
    lines = [
        line.encode()
        for path in sorted((ROOT / "tests" / "logs").rglob("*.log"))
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:30]
    ]
    assert len(lines) > 3000
    options = regexes.options()
    unanchored = regex_internals.UNANCHORED
    matched = 0
    for pattern in found:
        compiled = regex_internals.raw_regex(re2.compile(pattern, options))
        hits = 0
        for line in lines:
            if compiled.Match(unanchored, line, 0, len(line))[0][0] < 0 and rng.random() > 0.01:
                continue  # every matching line, and a few others
            # other digits, so that lines of one shape differ
            line = bytes(rng.choice(b"0123456789") if 48 <= c <= 57 else c for c in line)
            spans = compiled.Match(unanchored, line, 0, len(line))
            hits += spans[0][0] >= 0
            masked = line.translate(MASK)
            assert compiled.Match(unanchored, masked, 0, len(masked)) == spans, (pattern, line)
        matched += hits > 0
    assert matched > 150  # most patterns were tried on lines they match


def test_the_regex_internals_the_engine_relies_on_are_there():
    """google-re2's raw RE2 object and CPython's regex parser are private: an upgrade that moves
    them must fail here, by name, not inside a scan (rules/regex_internals.py)."""
    compiled = regex_internals.raw_regex(re2.compile(r"step (?P<n>\d+) took"))
    line = b"[rank0]: step 12 took 3 ms"
    spans = compiled.Match(regex_internals.UNANCHORED, line, 0, len(line))
    assert [tuple(s) for s in spans] == [(9, 21), (14, 16)]
    assert compiled.Match(regex_internals.UNANCHORED, line, 0, 12)[0][0] < 0  # `end` is honoured
    parsed = list(regex_internals.parse(r"(nan|inf)x+"))
    constants = regex_internals.sre_constants
    assert [op for op, _ in parsed] == [constants.SUBPATTERN, constants.MAX_REPEAT]
    for name in (
        "LITERAL",
        "NOT_LITERAL",
        "IN",
        "BRANCH",
        "MIN_REPEAT",
        "ANY",
        "AT",
        "NEGATE",
        "RANGE",
        "CATEGORY",
        "CATEGORY_DIGIT",
        "CATEGORY_WORD",
        "CATEGORY_NOT_SPACE",
        "CATEGORY_NOT_DIGIT",
        "CATEGORY_NOT_WORD",
        "CATEGORY_SPACE",
        "SRE_FLAG_IGNORECASE",
    ):
        assert hasattr(constants, name), name


def test_no_module_reaches_into_the_regex_internals_but_the_shim():
    """Private names of re2 and re are read in one place only."""
    package = ROOT / "src" / "trainwreck"
    shim = package / "rules" / "regex_internals.py"
    private = re.compile(
        r"\._regexp\b|\bre2\._re2\b|^\s*(?:import|from) (?:sre_\w+|re\._\w+)", re.MULTILINE
    )
    offenders = [
        f"{path.relative_to(package)}: {found.group(0).strip()}"
        for path in sorted(package.rglob("*.py"))
        if path != shim
        for found in private.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders


def test_a_bundle_stores_the_pattern_facts_diagnose_would_work_out():
    """The compiled bundle carries every pattern's required literals and digit-blindness, as
    worked out from the parse, so diagnose does not parse them again at start; a malformed
    item is left out (worked out again)."""
    from trainwreck.compile.bundle import rule_patterns
    from trainwreck.compile.packs import compile_folder

    bundle = compile_folder(ROOT)[0]
    table = bundle.data["pattern_facts"]
    patterns = set(rule_patterns(bundle.rules))
    assert set(table) == patterns and len(patterns) > 300
    for pattern in sorted(patterns):
        worked_out = regexes._literal_options(pattern)
        stored = regexes.PatternFacts.from_json(table[pattern])
        assert [list(option) for option in stored.literals] == worked_out[0], pattern
        assert stored.ignore_case == worked_out[1]
        assert stored.digit_blind == regexes._digit_blind(pattern), pattern
    regexes.learn({"x(?P<n>\\d+)": [[["never"]], "yes", True], 3: [[], False, False]})
    assert regexes.literal_options("x(?P<n>\\d+)") == regexes._literal_options("x(?P<n>\\d+)")
