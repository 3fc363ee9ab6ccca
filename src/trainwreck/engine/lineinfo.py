"""What a log line says about itself: its rank (prefix, inline words, file name) and its time.

The paste-shape layer (prefixes.py) removes launcher, host, logger and timestamp prefixes; this
module turns what they name into ranks, and reads ISO and glog timestamps into Unix time.
"""

from __future__ import annotations

import calendar
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from trainwreck.engine import prefixes

MAX_RANK_DIGITS = 9  # a "rank" of ten digits or more is not a rank
DIGIT_MASK = bytes.maketrans(b"123456789", b"000000000")  # a line's shape (shapes.py)

INLINE_RANK = re.compile(rb"\[Rank (\d+)\]|\brank\b\s?[=:]\s?(\d+)\b|\brank (\d+)\b", re.IGNORECASE)
_ISO = re.compile(rb"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_GLOG = re.compile(rb"(?:^|[\[\s])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
_FILE_RANK = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?:\D|$)", re.IGNORECASE)
_FILE_NUMBER = re.compile(r"^(\d+)\.(?:log|txt|out|err|jsonl)$")
_NODE = re.compile(r"^(?:node|host|worker)[_-]?\d+$", re.IGNORECASE)
SAMPLE_PREFIX = re.compile(rb"(?m)^(?:[\w.-]+: )?\[(?:rank|default)(\d+)\]:")
GLOG_YEAR = 2000  # glog lines carry no year; timestamps are only compared with each other
_MINUTES: dict[tuple[bytes, ...], float] = {}  # Unix time of each minute seen (see _iso_time)


def split_prefix(raw: bytes) -> tuple[Any, bytes]:
    """(rank, body) of a line through the shared paste-shape layer (prefixes.py): launcher, host,
    logger and timestamp prefixes are removed; rank None when none names one."""
    rank, body = prefixes.split_prefix(raw)
    return (rank_number(rank) if isinstance(rank, int) else rank), body


def rank_number(value: Any) -> int | None:
    """A rank from its digits (bytes, text or an int); None when it is not a plausible rank
    (more than MAX_RANK_DIGITS digits: int() would refuse 4300 and more)."""
    if isinstance(value, int):
        return value if 0 <= value < 10**MAX_RANK_DIGITS else None
    if len(value) > MAX_RANK_DIGITS:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _iso_time(groups: tuple[bytes, ...]) -> float:
    y, mo, d, h, mi, s, frac = groups
    # Lines of one run share their minute: timegm runs once per minute seen. It is exact, as
    # timegm is integer arithmetic over the fields (seconds only add).
    key = (y, mo, d, h, mi)
    minute = _MINUTES.get(key)
    if minute is None:
        try:
            minute = float(calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), 0)))
        except (ValueError, OverflowError):
            minute = math.nan
        if len(_MINUTES) >= 100_000:
            _MINUTES.clear()
        _MINUTES[key] = minute
    if minute != minute:
        return math.nan
    return minute + int(s) + (float(b"0." + frac) if frac else 0.0)


def parse_time(text: bytes | str) -> float:
    """Unix time of the first ISO or glog timestamp in a line (NaN when there is none): read at
    the fields time_spans finds, as a line's shape reads them."""
    if isinstance(text, str):
        text = text.encode("utf-8", "replace")
    return time_at(text, time_spans(text))


def _glog_time(groups: tuple[bytes, ...]) -> float:
    mo, d, h, mi, s, frac = groups
    try:
        base = calendar.timegm((GLOG_YEAR, int(mo), int(d), int(h), int(mi), int(s)))
    except (ValueError, OverflowError):
        return math.nan
    return base + float(b"0." + frac)


TimeSpans = tuple[bool, tuple[tuple[int, int], ...]]  # (ISO, else glog; its groups' spans)


def time_spans(text: bytes) -> TimeSpans | None:
    """Where parse_time reads the time of `text` (None: it has none). The timestamp patterns
    tell digits apart only by '\\d', so a line with its digits changed has the same spans."""
    for iso, pattern in ((True, _ISO), (False, _GLOG)):
        found = pattern.search(text, 0, 200)
        if found:
            return iso, found.regs[1:]
    return None


def time_at(text: bytes, spans: TimeSpans | None) -> float:
    """parse_time of `text` read at the spans time_spans found for its shape."""
    if spans is None:
        return math.nan
    iso, groups = spans
    values = tuple(text[a:b] if a >= 0 else None for a, b in groups)
    return _iso_time(values) if iso else _glog_time(values)  # type: ignore[arg-type]


# --- the same, over columns of lines (numpy; the shapes of a busy block, engine/shapes.py) ---


def gather(text: np.ndarray, starts: np.ndarray, low: int, high: int) -> np.ndarray:
    """Bytes low..high of the lines starting at `starts` in `text` (all of one shape, so the
    same fields), as a (lines, high - low) array."""
    width = high - low
    if width > text.shape[0]:
        return text[starts[:, None] + np.arange(low, high)]  # (raises IndexError, as it would)
    # The rows of a view of every `width` bytes from each offset: one copy of each line's
    # bytes, without an index per byte.
    windows = np.lib.stride_tricks.as_strided(
        text,
        (text.shape[0] - width + 1, width),
        (text.strides[0], text.strides[0]),
        writeable=False,
    )
    return windows[starts + low]


def digits_number(digits: np.ndarray, start: int, end: int) -> np.ndarray:
    """The whole numbers written by the ASCII digits in columns start..end of `digits`."""
    out = np.zeros(len(digits), dtype=np.int64)
    for column in range(start, end):
        out = out * 10 + (digits[:, column].astype(np.int64) - 48)
    return out


def iso_times(text: np.ndarray, starts: np.ndarray, spans: TimeSpans) -> np.ndarray | None:
    """_iso_time over many lines, with numpy: the ISO timestamps of the lines at `starts` of
    `text`, all with their fields at `spans` (of one shape), computed with the same integer
    calendar arithmetic as calendar.timegm and the same float steps; None when the fraction has
    more digits than a double holds exactly (line by line then). tests/test_rules_shapes.py
    pairs the two on thousands of edge-case stamps."""
    fields = spans[1]
    frac = fields[6]
    if frac[0] >= 0 and frac[1] - frac[0] > 15:
        return None
    low = fields[0][0]
    digits = gather(text, starts, low, max(end for _, end in fields))
    year, month, day, hour, minute, second = (
        digits_number(digits, start - low, end - low) for start, end in fields[:6]
    )
    valid = (month >= 1) & (month <= 12) & (year >= 1)
    # days from 1970-01-01 to the first of the month (H. Hinnant's days_from_civil), + day - 1
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468 + day - 1
    minutes = (((days * 24 + hour) * 60 + minute) * 60).astype(np.float64)
    times = minutes + second
    if frac[0] >= 0:
        times = times + digits_number(digits, frac[0] - low, frac[1] - low) / float(
            10 ** (frac[1] - frac[0])
        )
    return np.where(valid, times, np.nan)


def rank_from_path(display: str) -> Any:
    """Rank from a file name (rank_3.log, rank3.log, probe-rank3.jsonl, 3.log), else a node
    label from a folder (node-2/...), else None."""
    parts = Path(display.replace("\\", "/")).parts
    if not parts:
        return None
    name = parts[-1]
    for suffix in (".gz",):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    found = _FILE_RANK.search(name)
    if found:
        return int(found.group(1))
    found = _FILE_NUMBER.match(name)
    if found and len(parts) > 1:
        return int(found.group(1))
    for folder in reversed(parts[:-1]):
        if _NODE.match(folder):
            return folder
        found = _FILE_RANK.search(folder)
        if found:
            return int(found.group(1))
    return None
