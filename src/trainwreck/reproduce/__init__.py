"""`trainwreck reproduce`: execute reproduction notebooks for real, cache them, record evidence.

Each entry's notebook (notebooks/<id>.ipynb) runs in a fresh Jupyter kernel whose working
directory is the repository root (`execution`). Results go to build/: the executed notebook
(build/executed/<id>.ipynb), the evidence the notebook wrote (build/evidence/<id>/) and
build/manifest.json, one `RunRecord` per notebook (`records`, `manifest`). A notebook is
executed again only when its source hash changes (`source`: code cells, parameters, the entry's
`reproduction` block, toolkit version); otherwise the copy in build/cache/<hash>/ serves
(`cache`). GPU notebooks on a host without CUDA show their committed recording (`recordings`).

The modules, each one job:

    records      RunRecord (a manifest record, typed) and its Status enum
    source       the source hash, and reading a notebook's JSON
    targets      which notebooks a run covers (entries, notebooks without an entry)
    lint         what `trainwreck check` reports about a notebook
    recordings   GPU recordings under recordings/
    host         CPU, GPU, driver and CUDA facts of this machine
    layout       paths under build/, the record a run starts from
    processes    killing a kernel's process tree, reaping orphans
    execution    running one notebook in a kernel under time limits
    cache        build/cache/<hash>/
    manifest     build/manifest.json
    progress     the build's one progress line (done/total, estimate), cells to a log
    runner       reproduce(): every target, in parallel
    command      the command line

`trainwreck check` (core install) imports `notebook_problems` from here, so importing this
package loads only the light modules (standard library: records, source, targets, lint,
recordings); the execution side loads on first use of one of its names, and nbclient, nbformat,
jupyter and torch are imported only inside the functions that need them.
"""

from __future__ import annotations

import importlib
from typing import Any

from trainwreck.reproduce.lint import notebook_problems
from trainwreck.reproduce.recordings import (
    MAX_RECORDED_FILE,
    recording_path,
    recording_problems,
    recording_state,
)
from trainwreck.reproduce.records import (
    EvidenceFiles,
    Host,
    RunError,
    RunRecord,
    Status,
    Versions,
    manifest_records,
    status_word,
)
from trainwreck.reproduce.source import SCALES, source_hash
from trainwreck.reproduce.targets import ReproduceError, Target, discover, notebook_file

# name -> the module (under this package) that defines it, imported on first use
_LAZY = {
    "reproduce": "runner",
    "configure_parser": "command",
    "run": "command",
    "format_failure": "command",
    "RunOptions": "execution",
    "DEFAULT_CELL_TIMEOUT": "execution",
    "DEFAULT_TIMEOUT": "execution",
    "MANIFEST_VERSION": "manifest",
    "Layout": "layout",
    "write_recording": "recordings",
    "kill_tree": "processes",
    "reaping": "processes",
    "TOKEN_VARIABLE": "processes",
    "cpu_model": "host",
    "gpu_facts": "host",
    "cuda_available": "host",
}

__all__ = [
    "EvidenceFiles",
    "Host",
    "MAX_RECORDED_FILE",
    "ReproduceError",
    "RunError",
    "RunRecord",
    "SCALES",
    "Status",
    "Target",
    "Versions",
    "discover",
    "manifest_records",
    "notebook_file",
    "notebook_problems",
    "recording_path",
    "recording_problems",
    "recording_state",
    "source_hash",
    "status_word",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
