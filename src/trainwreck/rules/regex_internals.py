"""The one place that reaches into the regex libraries' private names.

The engine runs RE2 without google-re2's Python wrapper on its hot path: the wrapper's `search`
builds a match object per call and re-encodes offsets for str input, while the raw `_re2.RE2`
object it wraps answers `Match(anchor, bytes, pos, end)` with the group spans directly. The
required-literal analysis (rules/regexes.py) reads CPython's own parse of a pattern
(`re._parser`, `sre_parse` before 3.11). Neither is public API, so every use goes through the
names below, checked once at import: an upgrade that moves one fails here, loudly, with what
moved (and tests/test_rules_regexes.py exercises each), instead of deep inside a scan.
"""

from __future__ import annotations

from typing import Any

import re2

try:  # Python 3.11+
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]


class RegexInternalsMoved(ImportError):
    """A regex library no longer has a private name the engine relies on."""


def _need(found: bool, what: str) -> None:
    if not found:
        raise RegexInternalsMoved(
            f"trainwreck needs {what}, which this version of the library no longer has; "
            "update trainwreck/rules/regex_internals.py"
        )


_need(
    hasattr(re2, "_re2") and hasattr(getattr(re2, "_re2", None), "RE2"),
    "google-re2's raw RE2 class (re2._re2.RE2)",
)
_need(hasattr(re2._re2.RE2, "Anchor"), "re2._re2.RE2.Anchor")
_need("_regexp" in getattr(re2._Regexp, "__slots__", ()), "the raw RE2 object of re2._Regexp")
_need(callable(getattr(sre_parse, "parse", None)), "CPython's regex parser (re._parser.parse)")

# Match(UNANCHORED, data, pos, end) finds the leftmost match anywhere in data[pos:end].
UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED

RawRegex = Any  # re2._re2.RE2: Match(anchor, bytes, pos, end) -> ((start, end) of each group)


def raw_regex(compiled: Any) -> RawRegex:
    """The raw RE2 object of a pattern compiled by re2.compile."""
    return compiled._regexp


def parse(pattern: str) -> Any:
    """CPython's parse of `pattern` (a SubPattern: (opcode, argument) items; see sre_constants).
    Raises what the parser raises for a pattern it cannot read."""
    return sre_parse.parse(pattern)


__all__ = ["UNANCHORED", "RawRegex", "RegexInternalsMoved", "parse", "raw_regex", "sre_constants"]
