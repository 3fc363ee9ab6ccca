"""The numbers a fired rule's condition compared, as a report shows them (`Measured`).

A condition such as `oom_current.unalloc > 0.2 * oom_current.req` reads captures the engine
kept per matched line, already normalised (sizes to bytes, times to milliseconds). The person
on call needs those figures beside the verdict, so each field the condition names is reported
with its first value (the first matched line's) and the largest when the lines differ.
"""

from __future__ import annotations

import math
from typing import Any

from trainwreck.findings import Measured
from trainwreck.rules import condition as cond
from trainwreck.rules.matchers import UnitCapture
from trainwreck.rules.units import SIZE_BYTES, TIME_MS


def _dimension(unit: Any) -> str:
    """The base unit a capture was normalised to: "B", "ms", or "" (a plain number)."""
    if isinstance(unit, UnitCapture):
        # A unit read from the line: sizes unless its default says it is a time.
        return "ms" if unit.default in TIME_MS else "B"
    if unit in SIZE_BYTES:
        return "B"
    if unit in TIME_MS:
        return "ms"
    return ""


def measured(run: Any) -> dict[str, Measured]:
    """`field -> Measured` for every `part.field` the rule's condition reads from a matcher
    that matched (a RuleRun of the engine); a field two matched parts share is `part.field`."""
    tree = run.rule.condition_tree
    if tree is None:
        return {}
    found: list[tuple[str, str, Measured]] = []
    for part, name in sorted(cond.referenced_fields(tree)):
        state = run.matchers.get(part)
        matcher = run.rule.matchers.get(part)
        if state is None or matcher is None:
            continue
        values = [
            float(v)
            for v in state.columns.get(name, ())
            if isinstance(v, (int, float)) and math.isfinite(v)
        ]
        if values:
            largest = max(values) if len(set(values)) > 1 else None
            unit = _dimension(matcher.values.get(name))
            found.append((part, name, Measured(values[0], unit, len(values), largest)))
    names = [name for _, name, _ in found]
    return {
        (name if names.count(name) == 1 else f"{part}.{name}"): value for part, name, value in found
    }
