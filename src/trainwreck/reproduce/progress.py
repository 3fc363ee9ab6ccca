"""One progress line for a run of many notebooks: done/total, what runs, elapsed, an estimate.

The runner reports each notebook's start and end (`NotebookEvent`); every other line it prints
(each cell, heartbeats) goes to a log file instead of the terminal, and a failure is printed in
full. The estimate comes from the previous run's durations in build/manifest.json (on a fresh
clone, from the committed notebooks/durations.json), divided by the notebooks that run at once;
a notebook with no previous duration counts as the median. Notebooks served from the cache or
skipped make no line of their own.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class NotebookEvent:
    """A notebook started (`status` "running") or ended (passed, failed, cached, skipped...)."""

    id: str
    status: str
    seconds: float | None = None
    error: str = ""


NotebookEvents = Callable[[NotebookEvent], None]


# What a notebook that did not run this time reports: it takes no time and makes no line.
QUIET = frozenset({"cached", "skipped-needs-gpu", "not-reproducible", "recorded-gpu", "stale"})


def previous_durations(manifest: Path, committed: Path | None = None) -> dict[str, float]:
    """Each notebook's duration in the last run (build/manifest.json), when it ran for real;
    a notebook the manifest does not time takes its duration from `committed` (the repository's
    notebooks/durations.json, written by scripts/record_durations.py), so a fresh clone has an
    estimate too."""
    found: dict[str, float] = {}
    if committed is not None:
        timed = _json(committed).get("durations_s")
        found.update(_positive(timed.items() if isinstance(timed, dict) else []))
    records = _json(manifest).get("notebooks")
    found.update(
        _positive(
            (r.get("id"), r.get("duration_s"))
            for r in (records if isinstance(records, list) else [])
            if isinstance(r, dict)
        )
    )
    return found


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _positive(pairs: Iterable[tuple[Any, Any]]) -> dict[str, float]:
    """The (id, seconds) pairs that are a name and a positive number."""
    return {
        i: float(seconds)
        for i, seconds in pairs
        if isinstance(i, str) and isinstance(seconds, (int, float)) and seconds > 0
    }


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


class ProgressLine:
    """Turns notebook events into one status line (rewritten in place on a terminal, one line
    per finished notebook otherwise), and detailed lines into `log`."""

    def __init__(
        self,
        ids: Iterable[str],
        estimates: dict[str, float],
        jobs: int,
        log: IO[str],
        say: Callable[[str], None],
        *,
        in_place: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ids = list(ids)
        known = [estimates[i] for i in self.ids if i in estimates]
        typical = statistics.median(known) if known else None
        self.estimates = {i: estimates.get(i, typical) for i in self.ids}
        self.jobs = max(1, jobs)
        self.log = log
        self.say = say
        self.in_place = in_place
        self.clock = clock
        self.started = clock()
        self.running: dict[str, float] = {}
        self.done: set[str] = set()
        self.cached = 0

    def detail(self, line: str) -> None:
        """A line of the runner's own output: kept in the log, not shown."""
        self.log.write(line + "\n")
        self.log.flush()

    def event(self, event: NotebookEvent) -> None:
        self.detail(f"{event.id}: {event.status}" + (f" ({event.error})" if event.error else ""))
        if event.status == "running":
            self.running[event.id] = self.clock()
        else:
            self.running.pop(event.id, None)
            self.done.add(event.id)
            self.cached += event.status == "cached"
            if event.status == "failed":
                self.say(f"FAILED {event.id}: {event.error or 'see the log'}")
        if not self.in_place:
            # (a log file or CI: one line per notebook that ran, and one at the end)
            last = len(self.done) == len(self.ids)
            if event.status == "running" or (event.status in QUIET and not last):
                return
        self.say(("\r" if self.in_place else "") + self.status())

    def remaining(self) -> float | None:
        """Seconds left by the last run's durations; None when no notebook has one."""
        now = self.clock()
        left = 0.0
        for notebook_id in self.ids:
            if notebook_id in self.done:
                continue
            estimate = self.estimates.get(notebook_id)
            if estimate is None:
                return None
            if notebook_id in self.running:
                estimate = max(0.0, estimate - (now - self.running[notebook_id]))
            left += estimate
        return left / self.jobs

    def status(self) -> str:
        elapsed = self.clock() - self.started
        line = f"{len(self.done)}/{len(self.ids)} notebooks"
        if self.cached:
            line += f" ({self.cached} from the cache)"
        line += f", {_clock(elapsed)} elapsed"
        left = self.remaining()
        if left is not None and len(self.done) < len(self.ids):
            line += f", about {_clock(left)} left"
        if self.running:
            line += f"; running {', '.join(sorted(self.running))}"
        return line
