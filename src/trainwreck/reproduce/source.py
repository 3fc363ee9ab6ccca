"""The source hash of a notebook: what decides whether a run is still the run of this source.

Standard library only: `trainwreck check`, the site and `review` import it on the core install.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trainwreck import __version__

SCALES = ("ci", "full")


def read_notebook_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("not a notebook: no 'cells' list")
    return data


def cell_source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def source_hash(
    notebook: Path | dict[str, Any],
    reproduction: dict[str, Any] | None = None,
    scale: str = "ci",
    toolkit_version: str = __version__,
) -> str:
    """sha256 of what determines a run's result: the code cells' sources (markdown and outputs
    excluded), the `scale` parameter, the entry's `reproduction` block and the toolkit version.

    Entry prose is deliberately left out: editing an entry's text must neither re-run its
    notebook nor make a committed GPU recording stale. `evidence_dir` is left out too: it only
    says where the outputs go.
    """
    data = read_notebook_json(notebook) if isinstance(notebook, Path) else notebook
    code = [cell_source(c) for c in data.get("cells", []) if c.get("cell_type") == "code"]
    payload = {
        "code": code,
        "parameters": {"scale": scale},
        "reproduction": reproduction or {},
        "toolkit": toolkit_version,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def with_current_prose(executed_text: str, notebook: Path) -> str:
    """An executed notebook (a cached run, a GPU recording) with the current notebook's markdown
    and raw cells.

    Prose is not part of the source hash (editing it must not re-run a notebook), so a cached
    copy may carry older text; its code cells and outputs are current by construction (same
    hash, same code cells in the same order), so they are kept and the prose is taken from the
    notebook as it is now."""
    executed = json.loads(executed_text)
    current = read_notebook_json(notebook)
    ran = [c for c in executed.get("cells", []) if c.get("cell_type") == "code"]
    cells: list[dict[str, Any]] = []
    for cell in current["cells"]:
        if cell.get("cell_type") != "code":
            cells.append(cell)
            continue
        while ran and "injected-parameters" in (ran[0].get("metadata") or {}).get("tags", []):
            cells.append(ran.pop(0))
        if not ran:
            raise ValueError("cached notebook does not match the current one")
        cells.append(ran.pop(0))
    if ran:
        raise ValueError("cached notebook does not match the current one")
    executed["cells"] = cells
    return json.dumps(executed, indent=1, ensure_ascii=False) + "\n"
