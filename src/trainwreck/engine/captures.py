"""Captured values: a matcher's units applied to columns of its named captures.

A matcher's plan says how each capture converts: (capture, factor or None, unit capture or None,
default unit); factor 0.0 marks a string capture (kept as text), None an unknown unit (NaN).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

from trainwreck.engine.lineinfo import DIGIT_MASK
from trainwreck.rules.matchers import Unit, UnitCapture
from trainwreck.rules.units import factor, to_number

Plan = tuple[tuple[str, "float | None", "str | None", Any], ...]


def plan_of(values: Mapping[str, Unit]) -> Plan:
    """The conversion plan of a matcher's `values` (capture -> unit or unit capture)."""
    plan: list[tuple[str, float | None, str | None, Any]] = []
    for capture, unit in values.items():
        if isinstance(unit, UnitCapture):
            plan.append((capture, None, unit.unit_capture, unit.default))
        else:
            plan.append((capture, unit_factor(unit), None, None))
    return tuple(plan)


_UNIT_FACTORS: dict[Any, float | None] = {}


def unit_factor_cached(unit: Any) -> float | None:
    try:
        return _UNIT_FACTORS[unit]
    except KeyError:
        pass
    except TypeError:  # an unhashable default
        return unit_factor(unit)
    found = unit_factor(unit)
    if len(_UNIT_FACTORS) < 4096:
        _UNIT_FACTORS[unit] = found
    return found


def convert_columns(plan: Plan, columns: dict[str, list[Any]], n: int) -> dict[str, list[Any]]:
    """Apply a matcher's units to columns of its captures (one value per line, None where the
    capture did not take part; a line recorded on its own is a column of one): numbers times
    their unit's factor, NaN for an unknown unit, text for 'string'. Entries apply in plan
    order, so a unit capture is read as converted by the entries before it. Returns
    `columns`."""
    for capture, factor_, unit_capture, default in plan:
        values = columns.get(capture)
        if values is None:
            continue
        if unit_capture is not None:
            units = columns.get(unit_capture) or [None] * n
            try:
                alike = set(units)
            except TypeError:  # a JSON record's list or object as its unit: line by line
                alike = set()
            if len(alike) == 1:  # one unit throughout (the common case): as a plain factor
                unit_text = next(iter(alike)) or default
                factor_ = unit_factor_cached(unit_text) if unit_text else None
                unit_capture = None
        if isinstance(values, np.ndarray):  # numbers on every line (numeric_captures)
            if unit_capture is None and factor_ is None:
                columns[capture] = np.full(len(values), math.nan)
                continue
            if unit_capture is None and factor_ != 0.0:
                columns[capture] = values * factor_
                continue
            values = values.tolist()  # several units, or "string": line by line below
        if unit_capture is not None:
            out: list[Any] = []
            for value, unit in zip(values, units, strict=True):
                if value is None:
                    out.append(None)
                    continue
                unit_text = unit or default
                found = unit_factor_cached(unit_text) if unit_text else None
                if found is None:
                    out.append(math.nan)
                elif found == 0.0:
                    out.append(value)
                else:
                    out.append(number(value) * found)
            columns[capture] = out
        elif factor_ is None:
            columns[capture] = [None if v is None else math.nan for v in values]
        elif factor_ != 0.0:  # 0.0: "string", kept as text
            try:
                out = [float(v) * factor_ for v in values]
                if math.inf in out or -math.inf in out:
                    raise ValueError  # the word inf, or an overflow (number() tells them apart)
                columns[capture] = out
            except (TypeError, ValueError, OverflowError):  # None, 1,234, a huge int: one by one
                columns[capture] = [None if v is None else number(v) * factor_ for v in values]
    return columns


def numeric_captures(uses: list[tuple[Plan, Collection[str]]], names: Iterable[str]) -> set[str]:
    """The captures (of `names`) that every use, (plan, kept columns), reads only as a number:
    its plan converts it to one (a unit, or a unit capture), or its plan and kept columns never
    mention it (a series index, an event's step: number() reads those). The engine may read them
    straight into arrays (store.Batch.values), as nothing keeps their text."""
    found = set(names)
    for plan, kept in uses:
        numeric = {
            capture
            for capture, factor_, unit_capture, _ in plan
            if unit_capture is not None or (factor_ is not None and factor_ != 0.0)
        }
        mentioned = {capture for capture, *_ in plan} | {unit for _, _, unit, _ in plan if unit}
        found &= numeric | (found - mentioned - set(kept))
    return found


def column_numbers(columns: dict[str, list[Any]], name: str, n: int) -> np.ndarray:
    """A capture column as floats (number of each value; NaN where it is missing), computed
    once per batch and plan."""
    key = "\0numbers\0" + name
    found = columns.get(key)
    if found is None:
        values = columns.get(name)
        if values is None:
            found = [math.nan] * n
        elif isinstance(values, np.ndarray):
            found = values
        else:
            try:
                found = [v if v.__class__ is float else float(v) for v in values]
            except (TypeError, ValueError):
                found = [number(v) for v in values]
        columns[key] = found
    return np.asarray(found, dtype=np.float64)


def named(groups: list[tuple[str, int]], body: bytes, spans: Any) -> dict[str, Any]:
    """Named captures from RE2 spans, decoded leniently (groups that did not take part are left
    out)."""
    caps: dict[str, Any] = {}
    for name, group in groups:
        start, stop = spans[group]
        if start >= 0:
            caps[name] = body[start:stop].decode("utf-8", "replace")
    return caps


def number(value: Any) -> float:
    """A capture as a float; NaN when it is missing, not a number, or too large for a float (a
    bad value skips that value, never the run)."""
    if value is None:
        return math.nan
    if isinstance(value, float):
        return value
    try:
        found = float(value)
    except (TypeError, ValueError, OverflowError):
        return to_number(value)
    if math.isinf(found):
        return to_number(value)  # the word inf, or an overflow
    return found


NOT_DIGITS = bytes(c for c in range(256) if not 48 <= c <= 57)
_LAYOUTS: dict[bytes, tuple[bool, np.ndarray, float] | None] = {}


def decimal_layout(text: bytes) -> tuple[bool, np.ndarray, float] | None:
    """For a plain decimal number of this shape: (negative, the columns of its digits, 10 to
    the number of decimals); None for anything else (exponents, commas, spaces, words)."""
    shape = text.translate(DIGIT_MASK)
    if shape in _LAYOUTS:
        return _LAYOUTS[shape]
    found = None
    body = shape[1:] if shape[:1] in (b"-", b"+") else shape
    digits = body.count(b"0")
    if digits and digits <= 15 and body.replace(b"0", b"") in (b"", b"."):
        offset = len(shape) - len(body)
        columns = np.array([offset + i for i, c in enumerate(body) if c == 48], dtype=np.int64)
        decimals = len(body) - body.index(b".") - 1 if b"." in body else 0
        found = (shape[:1] == b"-", columns, float(10**decimals))
    if len(_LAYOUTS) < 4096:
        _LAYOUTS[shape] = found
    return found


def decimal_values(digits: np.ndarray, layout: tuple[bool, np.ndarray, float]) -> np.ndarray:
    """number() over many captures of one decimal_layout, with numpy: `digits` holds each
    capture's bytes (one row each). At most 15 digits, whose integer and power of ten are exact
    in a double, so one division rounds as float() does (tests/test_rules_shapes.py pairs the
    two on random decimals)."""
    negative, columns, scale = layout
    whole = digits[:, columns].astype(np.int64) - 48
    mantissa = whole @ (10 ** np.arange(len(columns) - 1, -1, -1, dtype=np.int64))
    found = mantissa / scale if scale != 1.0 else mantissa.astype(np.float64)
    return -found if negative else found


def unit_factor(unit: Any) -> float | None:
    """Multiplier to the base unit (0.0 marks 'string'); None for an unknown unit."""
    if unit == "string":
        return 0.0
    return factor(str(unit))
