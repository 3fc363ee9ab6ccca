"""Units of captured values: times normalise to milliseconds, sizes to bytes."""

from __future__ import annotations

import math

TIME_MS: dict[str, float] = {
    "ns": 1e-6,
    "us": 1e-3,
    "µs": 1e-3,
    "ms": 1.0,
    "s": 1000.0,
    "sec": 1000.0,
    "secs": 1000.0,
    "seconds": 1000.0,
    "min": 60_000.0,
    "h": 3_600_000.0,
}
SIZE_BYTES: dict[str, float] = {
    "B": 1.0,
    "b": 1.0,
    "bytes": 1.0,
    "byte": 1.0,
    "KiB": 1024.0,
    "MiB": 1024.0**2,
    "GiB": 1024.0**3,
    "TiB": 1024.0**4,
    "PiB": 1024.0**5,
    "KB": 1e3,
    "kB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
}
# Units a rule may name in `values` (the schema's enum); others are accepted from unit captures.
DECLARED_UNITS = [
    "ns",
    "us",
    "µs",
    "ms",
    "s",
    "sec",
    "min",
    "h",
    "B",
    "bytes",
    "KB",
    "MB",
    "GB",
    "TB",
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "number",
    "string",
]
FACTORS: dict[str, float] = {**TIME_MS, **SIZE_BYTES, "number": 1.0}


def factor(unit: str) -> float | None:
    """Multiplier to the base unit, or None for an unknown unit."""
    unit = unit.strip()
    if unit in FACTORS:
        return FACTORS[unit]
    return FACTORS.get(unit.lower()) if unit.lower() in ("ms", "s", "sec", "min", "bytes") else None


def to_number(text: object) -> float:
    """A captured value as a float; accepts 1,234.5 and 1.0E-04. NaN if it is not a number, or
    when it overflows a float (400 digits in a log): a bad value is skipped, never fatal. The
    words inf and infinity stay infinite (a loss can be)."""
    if isinstance(text, bool):
        return float(text)
    if isinstance(text, float):
        return text
    if isinstance(text, int):
        try:
            return float(text)
        except OverflowError:
            return math.nan
    if not isinstance(text, str):
        return math.nan
    try:
        number = float(text.replace(",", "").strip())
    except ValueError:
        return math.nan
    if math.isinf(number) and "inf" not in text.lower():
        return math.nan  # an overflow, not the word
    return number


def convert(value: object, unit: str) -> object:
    """Apply a declared unit to a captured value."""
    if unit == "string":
        return value if isinstance(value, str) else ("" if value is None else str(value))
    mult = factor(unit)
    number = to_number(value)
    if mult is None:
        return math.nan
    return number * mult
