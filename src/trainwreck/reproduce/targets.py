"""Which notebooks a run covers: one target per entry (and per notebook without an entry yet)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.errors import UsageError
from trainwreck.model import load_entries


class ReproduceError(UsageError):
    """Bad input to the runner (unknown id, unreadable notebook): one line, exit 2."""


@dataclass
class Target:
    """One notebook to run (or to account for) and what the entry says about it."""

    id: str
    notebook: str  # path relative to the root, e.g. notebooks/<id>.ipynb
    device: str  # cpu | gpu
    reproduction: dict[str, Any]
    not_reproducible: str | None = None


def discover(root: Path, ids: Iterable[str] | None = None) -> list[Target]:
    """Every reproduction target: entries' reproduction blocks, plus notebooks without an
    entry yet (device from the notebook's metadata.trainwreck.device, default cpu), so a
    contributor can run a notebook before its entry is written."""
    entries, _problems = load_entries(root)  # unparsable entries are check's to report
    targets: dict[str, Target] = {}
    for entry in entries:
        reproduction = entry.reproduction if isinstance(entry.reproduction, dict) else {}
        if "not_reproducible" in reproduction:
            targets[entry.id] = Target(
                entry.id,
                "",
                "none",
                reproduction,
                not_reproducible=str(reproduction["not_reproducible"]),
            )
            continue
        notebook = str(reproduction.get("notebook") or f"notebooks/{entry.id}.ipynb")
        try:
            device = str(
                reproduction.get("device") or _notebook_device(notebook_file(root, notebook))
            )
        except ValueError:  # the runner reports it
            device = "cpu"
        targets[entry.id] = Target(entry.id, notebook, device, reproduction)
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        if path.stem not in targets:
            notebook = f"notebooks/{path.name}"
            device = _notebook_device(path)
            targets[path.stem] = Target(
                path.stem, notebook, device, {"notebook": notebook, "device": device}
            )
    return pick(list(targets.values()), ids)


def pick(targets: list[Target], ids: Iterable[str] | None) -> list[Target]:
    """The targets named by `ids` in that order (every target, by id, when none are named).
    Raises ReproduceError naming the unknown ids."""
    by_id = {t.id: t for t in targets}
    if ids:
        wanted = list(dict.fromkeys(ids))
        unknown = [i for i in wanted if i not in by_id]
        if unknown:
            known = ", ".join(sorted(by_id)) or "none"
            raise ReproduceError(f"unknown id {', '.join(map(repr, unknown))} (known: {known})")
        return [by_id[i] for i in wanted]
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
