"""Which notebooks a run covers: one target per entry (and per notebook without an entry yet)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.errors import UsageError
from trainwreck.model import Entry, Reproduction, load_entries


class ReproduceError(UsageError):
    """Bad input to the runner (unknown id, unreadable notebook): one line, exit 2."""


@dataclass
class Target:
    """One notebook to run (or to account for) and what the entry says about it."""

    id: str  # the run's id: the entry's id, or its reproduction's (model.Reproduction.id)
    notebook: str  # path relative to the root, e.g. notebooks/<id>.ipynb
    device: str  # cpu | gpu
    reproduction: dict[str, Any]
    not_reproducible: str | None = None
    entry: str = ""  # the entry it reproduces ("" for a notebook without an entry yet)

    @property
    def entry_id(self) -> str:
        """The entry whose failure the run shows (the run's own id without an entry)."""
        return self.entry or self.id


def discover(root: Path, ids: Iterable[str] | None = None) -> list[Target]:
    """Every reproduction target: each reproduction of each entry (one for the single form, one
    per item of a list), plus notebooks without an entry yet (device from the notebook's
    metadata.trainwreck.device, default cpu), so a contributor can run a notebook before its
    entry is written. An id that two reproductions share is check's to report; the first
    keeps it here."""
    entries, _problems = load_entries(root)  # unparsable entries are check's to report
    targets: dict[str, Target] = {}
    for entry in entries:
        for reproduction in entry.reproductions or [_implicit(entry)]:
            if reproduction.id not in targets:
                targets[reproduction.id] = _target(root, reproduction)
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        if path.stem not in targets:
            notebook = f"notebooks/{path.name}"
            device = _notebook_device(path)
            targets[path.stem] = Target(
                path.stem, notebook, device, {"notebook": notebook, "device": device}
            )
    return pick(list(targets.values()), ids)


def _implicit(entry: Entry) -> Reproduction:
    # No usable reproduction block: the runner tries notebooks/<id>.ipynb (check reports it).
    return Reproduction(entry.id, entry.id, {}, ("reproduction",), single=True)


def _target(root: Path, reproduction: Reproduction) -> Target:
    block = reproduction.data
    if reproduction.not_reproducible is not None:
        return Target(
            reproduction.id,
            "",
            "none",
            block,
            not_reproducible=reproduction.not_reproducible,
            entry=reproduction.entry,
        )
    notebook = reproduction.notebook or f"notebooks/{reproduction.id}.ipynb"
    try:
        device = str(block.get("device") or _notebook_device(notebook_file(root, notebook)))
    except ValueError:  # the runner reports it
        device = "cpu"
    return Target(reproduction.id, notebook, device, block, entry=reproduction.entry)


def pick(targets: list[Target], ids: Iterable[str] | None) -> list[Target]:
    """The targets named by `ids` in that order (every target, by id, when none are named).
    An entry's id names all of its reproductions (a CPU host then runs the CPU notebook and
    accounts for the GPU one as its recording or as skipped); a reproduction's own id names
    that one. Raises ReproduceError naming the unknown ids."""
    by_id = {t.id: t for t in targets}
    by_entry: dict[str, list[Target]] = {}
    for target in targets:
        if target.entry:
            by_entry.setdefault(target.entry, []).append(target)
    if ids:
        wanted = list(dict.fromkeys(ids))
        unknown = [i for i in wanted if i not in by_id and i not in by_entry]
        if unknown:
            known = ", ".join(sorted(set(by_id) | set(by_entry))) or "none"
            raise ReproduceError(f"unknown id {', '.join(map(repr, unknown))} (known: {known})")
        chosen: dict[str, Target] = {}
        for i in wanted:
            for target in by_entry.get(i) or [by_id[i]]:
                chosen.setdefault(target.id, target)
        return list(chosen.values())
    return [by_id[i] for i in sorted(by_id)]


def notebook_file(root: Path, notebook: str) -> Path:
    """The notebook an entry names, resolved and confined to the repository's notebooks/ folder,
    before anything opens it: an entry comes from a pull request, and neither `..`, an absolute
    path nor a symlink may make check parse (or reproduce run) a file from elsewhere. Raises
    ValueError with the reason."""
    folder = (Path(root) / "notebooks").resolve()
    try:
        resolved = (Path(root) / notebook).resolve(strict=True)
    except FileNotFoundError:
        raise ValueError(f"notebook {notebook} does not exist") from None
    except (OSError, RuntimeError):  # a symlink loop, an unreadable folder
        resolved = None
    if (
        Path(notebook).is_absolute()
        or resolved is None
        or not resolved.is_relative_to(folder)
        or not resolved.is_file()
    ):
        raise ValueError(
            f"notebook {notebook} must be a regular file in notebooks/ of the repository"
        )
    return resolved


def _notebook_device(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        device = data.get("metadata", {}).get("trainwreck", {}).get("device", "cpu")
        return device if device in ("cpu", "gpu") else "cpu"
    except (OSError, ValueError, AttributeError):
        return "cpu"
