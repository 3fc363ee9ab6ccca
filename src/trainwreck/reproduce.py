"""`trainwreck reproduce`: execute reproduction notebooks for real, cache them, record evidence.

Each entry's notebook (notebooks/<id>.ipynb) runs in a fresh Jupyter kernel whose working
directory is the repository root. The runner injects a cell after the `parameters`-tagged cell
(papermill's convention) that sets `scale` and `evidence_dir`, executes cell by cell with a
timeout per cell and per notebook, and on timeout, interrupt or completion kills the kernel and
every process it started. Results go to build/: the executed notebook (build/executed/<id>.ipynb),
the evidence the notebook wrote (build/evidence/<id>/) and build/manifest.json.

A notebook is executed again only when its source hash changes (code cells, parameters, the
entry's `reproduction` block, toolkit version); otherwise the copy in build/cache/<hash>/ serves.

`trainwreck check` (core install) imports `notebook_problems` from here, so this module must not
import nbclient, nbformat, jupyter or torch at module level; they are imported where used.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck import __version__
from trainwreck.model import Entry, Problem, display_path, load_entries

Manifest = dict[str, Any]
Record = dict[str, Any]
Progress = Callable[[str], None]

MANIFEST_VERSION = 1
DEFAULT_CELL_TIMEOUT = 600.0
DEFAULT_TIMEOUT = 1800.0
SCALES = ("ci", "full")
# Printed by the last, hidden cell so the manifest records the kernel's own versions.
VERSIONS_MARKER = "__TRAINWRECK_VERSIONS__"
HEARTBEAT_S = 20.0

STATUSES = (
    "passed",
    "failed",
    "skipped-needs-gpu",
    "recorded-gpu",
    "stale",
    "not-reproducible",
)


class ReproduceError(Exception):
    """Bad input to the runner (unknown id, unreadable notebook): reported as one line."""


# --- targets ---------------------------------------------------------------------------------


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
        except ValueError:  # _run_one reports it
            device = "cpu"
        targets[entry.id] = Target(entry.id, notebook, device, reproduction)
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        if path.stem not in targets:
            notebook = f"notebooks/{path.name}"
            device = _notebook_device(path)
            targets[path.stem] = Target(
                path.stem, notebook, device, {"notebook": notebook, "device": device}
            )
    if ids:
        wanted = list(dict.fromkeys(ids))
        unknown = [i for i in wanted if i not in targets]
        if unknown:
            known = ", ".join(sorted(targets)) or "none"
            raise ReproduceError(f"unknown id {', '.join(map(repr, unknown))} (known: {known})")
        return [targets[i] for i in wanted]
    return [targets[i] for i in sorted(targets)]


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


# --- hashing -------------------------------------------------------------------------------


def _read_notebook_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("not a notebook: no 'cells' list")
    return data


def _cell_source(cell: dict[str, Any]) -> str:
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
    data = _read_notebook_json(notebook) if isinstance(notebook, Path) else notebook
    code = [_cell_source(c) for c in data.get("cells", []) if c.get("cell_type") == "code"]
    payload = {
        "code": code,
        "parameters": {"scale": scale},
        "reproduction": reproduction or {},
        "toolkit": toolkit_version,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


# --- notebook problems (used by `trainwreck check`) -------------------------------------------


def notebook_problems(entry: Entry, root: Path) -> list[Problem]:
    """What is wrong with an entry's reproduction notebook and GPU recording, as Problems.

    Needs only the standard library (nbformat's schema check runs when it is installed).
    """
    root = Path(root)
    reproduction = entry.reproduction if isinstance(entry.reproduction, dict) else {}
    if "not_reproducible" in reproduction:
        return []
    doc = entry.document
    notebook = reproduction.get("notebook")
    if not notebook:
        return [
            doc.problem(
                ("reproduction",) if "reproduction" in entry.data else (),
                "no reproduction notebook: set reproduction.notebook and device, or "
                "reproduction.not_reproducible with the reason",
            )
        ]
    try:
        path = notebook_file(root, str(notebook))
    except ValueError as exc:
        return [doc.problem(("reproduction", "notebook"), str(exc))]
    display = display_path(path, root)
    problems: list[Problem] = []
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        return [Problem(display, 1, 1, "", f"not valid UTF-8: {exc.reason}")]
    except json.JSONDecodeError as exc:
        return [Problem(display, exc.lineno, exc.colno, "", f"not valid JSON: {exc.msg}")]
    except OSError as exc:
        return [Problem(display, 1, 1, "", f"cannot read notebook: {exc.strerror}")]
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return [Problem(display, 1, 1, "", "not a Jupyter notebook (no 'cells' list)")]
    if data.get("nbformat") != 4:
        problems.append(
            Problem(display, 1, 1, "nbformat", f"expected nbformat 4, found {data.get('nbformat')}")
        )
    problems.extend(_nbformat_schema_problems(data, display))
    problems.extend(_parameters_problems(data, display, text))
    problems.extend(recording_problems(entry.id, root, data, reproduction))
    return problems


def _nbformat_schema_problems(data: dict[str, Any], display: str) -> list[Problem]:
    try:
        import nbformat
    except ImportError:  # core install: the structural checks above and below still run
        return []
    try:
        nbformat.validate(nbformat.from_dict(data))
    except nbformat.ValidationError as exc:
        where = ".".join(str(p) for p in getattr(exc, "absolute_path", []) or [])
        message = str(getattr(exc, "message", exc)).splitlines()[0]
        return [Problem(display, 1, 1, where, f"invalid notebook: {message}")]
    except Exception as exc:  # a malformed notebook must be reported, never crash check
        return [Problem(display, 1, 1, "", f"invalid notebook: {exc}")]
    return []


def _cell_line(text: str, index: int) -> int:
    """Best-effort line of the index-th cell in the notebook's JSON text (1 if not found)."""
    seen = -1
    for number, raw in enumerate(text.splitlines(), 1):
        if '"cell_type"' in raw:
            seen += 1
            if seen == index:
                return number
    return 1


def _parameters_problems(data: dict[str, Any], display: str, text: str) -> list[Problem]:
    cells = data["cells"]
    code = [
        (i, c) for i, c in enumerate(cells) if isinstance(c, dict) and c.get("cell_type") == "code"
    ]
    if not code:
        return [Problem(display, 1, 1, "cells", "notebook has no code cells")]
    index, first = code[0]
    where = f"cells[{index}]"
    line = _cell_line(text, index)
    tags = (first.get("metadata") or {}).get("tags") or []
    problems: list[Problem] = []
    if "parameters" not in tags:
        problems.append(
            Problem(
                display,
                line,
                1,
                where,
                "the first code cell must be tagged 'parameters' (cell metadata "
                '{"tags": ["parameters"]})',
            )
        )
    try:
        tree = ast.parse(_cell_source(first))
    except SyntaxError as exc:
        return [*problems, Problem(display, line, 1, where, f"parameters cell: {exc.msg}")]
    names = {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    missing = [n for n in ("scale", "evidence_dir") if n not in names]
    if missing:
        problems.append(
            Problem(
                display, line, 1, where, f"parameters cell does not define {', '.join(missing)}"
            )
        )
    return problems


def recording_path(root: Path, entry_id: str) -> Path:
    return root / "recordings" / f"{entry_id}.ipynb"


def recording_state(
    root: Path,
    entry_id: str,
    notebook: dict[str, Any],
    reproduction: dict[str, Any],
) -> tuple[str, dict[str, Any], str]:
    """("none" | "current" | "stale" | "invalid", provenance, reason) of recordings/<id>.ipynb."""
    path = recording_path(root, entry_id)
    if not path.is_file():
        return "none", {}, ""
    try:
        recorded = _read_notebook_json(path)
    except (OSError, ValueError) as exc:
        return "invalid", {}, f"cannot read the recording: {exc}"
    provenance = recorded.get("metadata", {}).get("trainwreck", {}).get("provenance")
    if not isinstance(provenance, dict) or not provenance.get("source_hash"):
        return "invalid", {}, "recording has no metadata.trainwreck.provenance.source_hash"
    scale = str(provenance.get("scale", "ci"))
    current = source_hash(notebook, reproduction, scale=scale)
    if provenance["source_hash"] != current:
        return (
            "stale",
            provenance,
            f"stale GPU recording: recorded for source_hash {provenance['source_hash'][:12]}, "
            f"the current notebook hashes to {current[:12]}; re-record it on a GPU "
            "(trainwreck reproduce on a CUDA host) or delete it",
        )
    return "current", provenance, ""


def recording_problems(
    entry_id: str, root: Path, notebook: dict[str, Any], reproduction: dict[str, Any]
) -> list[Problem]:
    state, _provenance, reason = recording_state(root, entry_id, notebook, reproduction)
    if state in ("stale", "invalid"):
        display = display_path(recording_path(root, entry_id), root)
        return [Problem(display, 1, 1, "metadata.trainwreck.provenance", reason)]
    return []


# --- host facts ------------------------------------------------------------------------------


def cpu_model() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in (
            Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
        ):
            if line.lower().startswith(("model name", "hardware", "processor\t: ")):
                value = line.split(":", 1)[1].strip()
                if value and not value.isdigit():
                    model = value
                    break
    if not model:
        import platform

        model = platform.processor() or platform.machine() or "unknown CPU"
    return f"{model} ({os.cpu_count() or 1} logical CPUs)"


def gpu_facts() -> tuple[str | None, str | None]:
    """(GPU name, driver version) from nvidia-smi, or (None, None) without an NVIDIA GPU."""
    if not shutil.which("nvidia-smi"):
        return None, None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    rows = [r.split(",") for r in out.strip().splitlines() if "," in r]
    if not rows:
        return None, None
    names = [r[0].strip() for r in rows]
    name = names[0] if len(set(names)) == 1 else ", ".join(names)
    if len(names) > 1 and len(set(names)) == 1:
        name = f"{len(names)}x {name}"
    return name, rows[0][1].strip()


def cuda_available(python: str = sys.executable, timeout: float = 120.0) -> bool:
    """torch.cuda.is_available(), asked of a subprocess so this process never imports torch."""
    try:
        result = subprocess.run(
            [python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
            capture_output=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# Runs as the hidden last cell: versions as the kernel sees them, cheaply (torch is not imported
# just for this; its version.py is read when the notebook did not import it).
_VERSIONS_CODE = f"""
def __trainwreck_versions():
    import json, platform, sys, importlib.util, os
    v = {{"python": platform.python_version(), "torch": None, "cuda": None, "gpu": None}}
    t = sys.modules.get("torch")
    if t is not None:
        v["torch"] = getattr(t, "__version__", None)
        v["cuda"] = getattr(getattr(t, "version", None), "cuda", None)
        try:
            if t.cuda.is_available() and t.cuda.is_initialized():
                v["gpu"] = t.cuda.get_device_name(0)
        except Exception:
            pass
    else:
        try:
            spec = importlib.util.find_spec("torch")
            if spec is not None and spec.origin:
                ns = {{}}
                path = os.path.join(os.path.dirname(spec.origin), "version.py")
                exec(open(path).read(), ns)
                v["torch"] = ns.get("__version__")
                v["cuda"] = ns.get("cuda")
        except Exception:
            pass
    print("{VERSIONS_MARKER}" + json.dumps(v))
__trainwreck_versions()
del __trainwreck_versions
"""


# --- build layout ------------------------------------------------------------------------------


@dataclass
class Layout:
    root: Path
    build: Path

    @property
    def manifest(self) -> Path:
        return self.build / "manifest.json"

    def executed(self, entry_id: str) -> Path:
        return self.build / "executed" / f"{entry_id}.ipynb"

    def evidence(self, entry_id: str) -> Path:
        return self.build / "evidence" / entry_id

    def cache(self, digest: str) -> Path:
        return self.build / "cache" / digest

    def lock(self, entry_id: str) -> Path:
        return self.build / "locks" / f"{entry_id}.lock"

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)


def _evidence_record(layout: Layout, directory: Path) -> dict[str, Any]:
    def files(sub: str) -> list[str]:
        base = directory / sub
        if not base.is_dir():
            return []
        return [layout.rel(p) for p in sorted(base.rglob("*")) if p.is_file()]

    metrics = directory / "metrics.json"
    figures = sorted(directory.rglob("*.png")) if directory.is_dir() else []
    return {
        "dir": layout.rel(directory),
        "logs": {"broken": files("broken"), "fixed": files("fixed")},
        "metrics": layout.rel(metrics) if metrics.is_file() else None,
        "figures": [layout.rel(p) for p in figures],
    }


def _base_record(target: Target, layout: Layout, status: str, digest: str | None) -> Record:
    return {
        "id": target.id,
        "notebook": target.notebook,
        "device": target.device if target.device in ("cpu", "gpu") else "cpu",
        "status": status,
        "cached": False,
        "source_hash": digest,
        "executed": None,
        "host": {"cpu": cpu_model(), "gpu": None, "driver": None},
        "versions": {"python": None, "torch": None, "cuda": None},
        "started": _now(),
        "duration_s": 0.0,
        "evidence": {
            "dir": layout.rel(layout.evidence(target.id)),
            "logs": {"broken": [], "fixed": []},
            "metrics": None,
            "figures": [],
        },
        "error": None,
    }


# --- process cleanup -----------------------------------------------------------------------------


# Set in each kernel's environment, and so inherited by everything the notebook starts: a
# process that double-forks into its own session leaves the kernel's tree and process group, but
# still carries the token.
TOKEN_VARIABLE = "TRAINWRECK_REPRODUCE_TOKEN"
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def kill_tree(pid: int | None, pgid: int | None = None, token: str | None = None) -> list[int]:
    """SIGKILL a process, all its descendants, its process group, and every process of this user
    whose environment carries `token` (a daemon the notebook started); returns the pids hit.

    Everything is collected before anything is killed (a killed parent's children are
    re-parented and could no longer be found through it)."""
    killed: list[int] = []
    procs: list[Any] = []
    try:
        import psutil
    except ImportError:  # repro extra not installed: the process group still goes
        psutil = None
    if psutil is not None:
        if pid:
            try:
                parent = psutil.Process(pid)
                procs = [*parent.children(recursive=True), parent]
            except psutil.Error:
                procs = []
        if token:
            procs += [p for p in _carrying(psutil, token) if p not in procs]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
                killed.append(proc.pid)
    if pgid:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    if psutil is not None and procs:
        psutil.wait_procs(procs, timeout=5)  # also reaps those re-parented to this process
    return killed


def _carrying(psutil: Any, token: str) -> list[Any]:
    """This user's processes whose environment holds the token (others' cannot be read)."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(TOKEN_VARIABLE) == token:
                found.append(proc)
    return found


def _child_subreaper(on: bool) -> bool | None:
    """Make this process the Linux child sub-reaper (orphans of its descendants are re-parented
    to it, not to init, so a notebook's double-forked daemon stays in our tree even when it
    clears its environment). Returns the previous setting; None where unsupported."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
            return None
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return bool(previous.value)


@contextlib.contextmanager
def reaping() -> Iterator[None]:
    """For the duration of a reproduce run, adopt every orphan of the notebooks, and at the end
    kill and reap every process that appeared under this one (kernels are shut down by then, so
    what is left is something a notebook left running)."""
    try:
        import psutil
    except ImportError:
        yield
        return
    previous = _child_subreaper(True)
    me = psutil.Process()
    before: set[int] = set()
    with contextlib.suppress(psutil.Error):
        before = {child.pid for child in me.children(recursive=True)}
    try:
        yield
    finally:
        strays = []
        with contextlib.suppress(psutil.Error):
            strays = [c for c in me.children(recursive=True) if c.pid not in before]
        for proc in strays:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if strays:
            psutil.wait_procs(strays, timeout=5)
        if previous is not None:
            _child_subreaper(previous)


# --- execution -----------------------------------------------------------------------------------


@dataclass
class RunOptions:
    scale: str = "ci"
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    timeout: float = DEFAULT_TIMEOUT
    force: bool = False
    record: bool = False  # save passed GPU runs to recordings/ (to be committed)
    interrupted: bool = False  # set by SIGINT/SIGTERM; running notebooks stop and are killed


def _first_lines(source: str, n: int = 3) -> str:
    lines = source.strip("\n").splitlines()
    text = "\n".join(lines[:n])
    return text + ("\n..." if len(lines) > n else "")


def _printed_tail(cell: Any, n: int = 12) -> str:
    """The last lines a failed cell printed: a bare assertion says little without them, and a CI
    log is often all there is of a failure that does not happen again."""
    text = "".join(
        str(out.get("text", "")) for out in cell.get("outputs", []) if out.get("output_type") == "stream"
    )
    return "\n".join(text.rstrip("\n").splitlines()[-n:])


def _prepare(nb: Any, params: dict[str, Any]) -> tuple[Any, list[int]]:
    """Insert the injected-parameters cell; returns the notebook and, for each cell of it, the
    index of that cell in the source notebook (-1 for the injected one)."""
    import nbformat

    code = "\n".join(
        ["# Parameters injected by trainwreck reproduce"]
        + [f"{name} = {value!r}" for name, value in params.items()]
    )
    injected = nbformat.v4.new_code_cell(code, metadata={"tags": ["injected-parameters"]})
    injected.pop("id", None)
    cells = list(nb.cells)
    position = 0
    for i, cell in enumerate(cells):
        if cell.cell_type == "code":
            if "parameters" in cell.metadata.get("tags", []):
                position = i + 1
            break
    nb.cells = [*cells[:position], injected, *cells[position:]]
    mapping = [*range(position), -1, *range(position, len(cells))]
    # nbformat 4.5 wants cell ids; give the injected cell one that cannot collide.
    if nb.nbformat_minor >= 5:
        injected["id"] = "trainwreck-injected-parameters"
    return nb, mapping


async def _execute(
    target: Target,
    layout: Layout,
    options: RunOptions,
    digest: str,
    progress: Progress,
) -> Record:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    record = _base_record(target, layout, "failed", digest)
    started = time.monotonic()
    evidence = layout.evidence(target.id)
    evidence_rel = layout.rel(evidence)
    shutil.rmtree(evidence, ignore_errors=True)
    evidence.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(layout.root / target.notebook, as_version=4)
    nb, mapping = _prepare(nb, {"scale": options.scale, "evidence_dir": evidence_rel})
    client = NotebookClient(
        nb,
        timeout=int(options.cell_timeout),
        kernel_name="python3",
        resources={"metadata": {"path": str(layout.root)}},
        record_timing=True,
    )
    client.create_kernel_manager()
    pid: int | None = None
    pgid: int | None = None
    token = uuid.uuid4().hex
    versions: dict[str, Any] = {}
    error: dict[str, Any] | None = None
    current = {"cell": -1, "since": started}
    deadline = started + options.timeout
    code_total = sum(1 for c in nb.cells if c.cell_type == "code")

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if current["cell"] >= 0:
                progress(
                    f"{target.id}: still in cell {current['cell']} "
                    f"({time.monotonic() - current['since']:.0f} s in cell, "
                    f"{time.monotonic() - started:.0f} s total)"
                )

    kernel_log = layout.build / "kernel-logs" / f"{target.id}.log"
    log_handle = None
    beat = asyncio.ensure_future(heartbeat())
    try:
        env = dict(os.environ)
        # Plots render inline and files are written; no display is needed.
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        env["PYTHONUNBUFFERED"] = "1"
        env["TRAINWRECK_REPRODUCE"] = "1"
        env[TOKEN_VARIABLE] = token
        # The kernel's own stdout/stderr (ipykernel warnings, crashes of C code) go to a log
        # file, not into the progress output of this command.
        kernel_log.parent.mkdir(parents=True, exist_ok=True)
        log_handle = open(kernel_log, "wb")  # noqa: SIM115 - closed in finally
        await client.async_start_new_kernel(
            cwd=str(layout.root), env=env, stdout=log_handle, stderr=log_handle
        )
        provisioner = getattr(client.km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        pgid = getattr(provisioner, "pgid", None)
        await client.async_start_new_kernel_client()
        execution_count = 0
        kernel_busy = False  # still running a cell (timed out) or dead: do not query it
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            execution_count += 1
            remaining = deadline - time.monotonic()
            if remaining <= 1:
                raise _NotebookTimeout()
            client.timeout = max(1, int(min(options.cell_timeout, remaining)))
            notebook_limited = remaining < options.cell_timeout
            src_index = mapping[index]
            current.update(cell=src_index, since=time.monotonic())
            label = "injected parameters" if src_index < 0 else f"cell {src_index}"
            progress(
                f"{target.id}: {label} ({execution_count}/{code_total} code cells, "
                f"{time.monotonic() - started:.1f} s)"
            )
            try:
                await client.async_execute_cell(cell, index, execution_count=execution_count)
            except CellTimeoutError:
                kernel_busy = True
                message = (
                    f"notebook exceeded its {options.timeout:g} s limit"
                    if notebook_limited
                    else f"cell timed out after {client.timeout} s"
                )
                error = {"cell": src_index, "source": cell.source, "message": message}
                break
            except CellExecutionError as exc:
                message = f"{exc.ename}: {exc.evalue}" if exc.ename else str(exc)
                error = {"cell": src_index, "source": cell.source, "message": message}
                printed = _printed_tail(cell)
                if printed:
                    error["output"] = printed
                break
            except DeadKernelError:
                kernel_busy = True
                error = {
                    "cell": src_index,
                    "source": cell.source,
                    "message": "the kernel died (killed, crashed or out of memory); its "
                    f"output is in {layout.rel(kernel_log)}",
                }
                break
        if options.interrupted:
            # nbclient turns the cancellation of a running cell into DeadKernelError.
            raise asyncio.CancelledError
        if not kernel_busy:
            versions = await _kernel_versions(client, nb)
    except _NotebookTimeout:
        error = {
            "cell": current["cell"],
            "source": "",
            "message": f"notebook exceeded its {options.timeout:g} s limit",
        }
    except asyncio.CancelledError:
        error = {"cell": current["cell"], "source": "", "message": "interrupted"}
        raise
    except Exception as exc:  # kernel failed to start, zmq trouble: a notebook failure
        error = {
            "cell": current["cell"],
            "source": "",
            "message": f"{type(exc).__name__}: {exc}",
        }
    finally:
        beat.cancel()
        kill_tree(pid, pgid, token)
        await _cleanup_client(client)
        if log_handle is not None:
            log_handle.close()
        record["duration_s"] = round(time.monotonic() - started, 2)
        if error is not None and error["source"] == "" and error["cell"] >= 0:
            error["source"] = _source_of(layout.root / target.notebook, error["cell"])
        record["error"] = error
        record["status"] = "passed" if error is None else "failed"
        _finish_record(record, layout, target, nb, versions, options)
    return record


class _NotebookTimeout(Exception):
    pass


async def _kernel_versions(client: Any, nb: Any) -> dict[str, Any]:
    import nbformat

    cell = nbformat.v4.new_code_cell(_VERSIONS_CODE)
    nb.cells.append(cell)
    try:
        client.timeout = 60
        await client.async_execute_cell(cell, len(nb.cells) - 1)
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            for line in text.splitlines():
                if line.startswith(VERSIONS_MARKER):
                    return json.loads(line[len(VERSIONS_MARKER) :])
    except Exception:  # versions are best effort; a failed probe must not fail the notebook
        return {}
    finally:
        nb.cells.remove(cell)
    return {}


async def _cleanup_client(client: Any) -> None:
    with contextlib.suppress(Exception):
        if client.km is not None:
            await asyncio.wait_for(client.km.shutdown_kernel(now=True), 15)
    with contextlib.suppress(Exception):
        if client.km is not None:
            await asyncio.wait_for(client.km.cleanup_resources(), 5)
    with contextlib.suppress(Exception):
        if client.kc is not None:
            client.kc.stop_channels()
    client.kc = None
    client.km = None


def _source_of(path: Path, index: int) -> str:
    try:
        return _cell_source(_read_notebook_json(path)["cells"][index])
    except (OSError, ValueError, IndexError, KeyError):
        return ""


def _finish_record(
    record: Record,
    layout: Layout,
    target: Target,
    nb: Any,
    versions: dict[str, Any],
    options: RunOptions,
) -> None:
    import nbformat

    gpu, driver = gpu_facts()
    record["host"]["gpu"] = gpu or versions.get("gpu")
    record["host"]["driver"] = driver
    record["versions"] = {
        "python": versions.get("python"),
        "torch": versions.get("torch"),
        "cuda": versions.get("cuda"),
    }
    record["evidence"] = _evidence_record(layout, layout.evidence(target.id))
    executed = layout.executed(target.id)
    executed.parent.mkdir(parents=True, exist_ok=True)
    nb.metadata.setdefault("trainwreck", {})
    nb.metadata["trainwreck"]["provenance"] = {
        "source_hash": record["source_hash"],
        "scale": options.scale,
        "status": record["status"],
        "host": record["host"]["cpu"],
        "gpu": record["host"]["gpu"],
        "driver": record["host"]["driver"],
        "versions": record["versions"],
        "date": record["started"],
        "duration_s": record["duration_s"],
        "toolkit_version": __version__,
    }
    _atomic_write(executed, nbformat.writes(nb))
    record["executed"] = layout.rel(executed)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; build outputs are read by other users/tools
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- cache ---------------------------------------------------------------------------------------


def _store_cache(layout: Layout, record: Record) -> None:
    """Copy the executed notebook and its evidence to build/cache/<hash>/ (atomically)."""
    final = layout.cache(record["source_hash"])
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        tmp.chmod(0o755)  # mkdtemp makes 0700
        shutil.copy2(layout.root / record["executed"], tmp / "executed.ipynb")
        shutil.copytree(layout.evidence(record["id"]), tmp / "evidence")
        (tmp / "record.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def _restore_cache(layout: Layout, target: Target, digest: str) -> Record | None:
    """The cached record for this hash, with its notebook and evidence restored into place."""
    directory = layout.cache(digest)
    try:
        record = json.loads((directory / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("status") != "passed" or record.get("source_hash") != digest:
        return None
    if not (directory / "executed.ipynb").is_file() or not (directory / "evidence").is_dir():
        return None
    executed = layout.executed(target.id)
    executed.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = _with_current_prose(
            (directory / "executed.ipynb").read_text(encoding="utf-8"),
            layout.root / target.notebook,
        )
    except (OSError, ValueError):
        return None
    _atomic_write(executed, text)
    evidence = layout.evidence(target.id)
    shutil.rmtree(evidence, ignore_errors=True)
    shutil.copytree(directory / "evidence", evidence)
    record["cached"] = True
    record["id"] = target.id
    record["notebook"] = target.notebook
    record["executed"] = layout.rel(executed)
    record["evidence"] = _evidence_record(layout, evidence)
    return record


MAX_RECORDED_FILE = 10 << 20  # evidence files larger than this stay out of git


def write_recording(layout: Layout, record: Record) -> str:
    """Copy a passed GPU run to recordings/<id>.ipynb (the executed notebook, whose metadata
    carries its provenance) and recordings/<id>/ (its evidence, files over 10 MiB left out)."""
    entry_id = record["id"]
    target = recording_path(layout.root, entry_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(layout.root / record["executed"], target)
    folder = layout.root / "recordings" / entry_id
    shutil.rmtree(folder, ignore_errors=True)
    source = layout.root / record["evidence"]["dir"]
    for path in sorted(source.rglob("*")):
        if path.is_file() and path.stat().st_size <= MAX_RECORDED_FILE:
            destination = folder / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
    return layout.rel(target)


def _with_current_prose(executed_text: str, notebook: Path) -> str:
    """The cached executed notebook with the current notebook's markdown and raw cells.

    Prose is not part of the source hash (editing it must not re-run a notebook), so a cached
    copy may carry older text; its code cells and outputs are current by construction (same
    hash, same code cells in the same order), so they are kept and the prose is taken from the
    notebook as it is now."""
    executed = json.loads(executed_text)
    current = _read_notebook_json(notebook)
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


@contextlib.asynccontextmanager
async def _id_lock(layout: Layout, entry_id: str) -> AsyncIterator[None]:
    """An advisory lock per id, so two runs in one tree do not write one evidence folder at
    the same time (the second then finds the first one's result in the cache)."""
    import fcntl

    path = layout.lock(entry_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - held for the duration of the context
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.5)
        yield
    finally:
        handle.close()


# --- orchestration -------------------------------------------------------------------------------


def _recorded_gpu(
    target: Target, layout: Layout, notebook: dict[str, Any], scale: str = "ci"
) -> Record:
    state, provenance, reason = recording_state(
        layout.root, target.id, notebook, target.reproduction
    )
    digest = source_hash(notebook, target.reproduction, scale=scale)
    if state == "none":
        return _base_record(target, layout, "skipped-needs-gpu", digest)
    if state != "current":
        record = _base_record(target, layout, "stale", digest)
        record["error"] = {"cell": -1, "source": "", "message": reason}
        return record
    record = _base_record(target, layout, "recorded-gpu", provenance["source_hash"])
    executed = layout.executed(target.id)
    executed.parent.mkdir(parents=True, exist_ok=True)
    recording = recording_path(layout.root, target.id)
    try:  # same code as the current notebook (same hash): show the current prose
        _atomic_write(
            executed,
            _with_current_prose(
                recording.read_text(encoding="utf-8"), layout.root / target.notebook
            ),
        )
    except (OSError, ValueError):
        shutil.copy2(recording, executed)
    record["executed"] = layout.rel(executed)
    record["host"] = {
        "cpu": provenance.get("host"),
        "gpu": provenance.get("gpu"),
        "driver": provenance.get("driver"),
    }
    versions = provenance.get("versions") or {}
    record["versions"] = {k: versions.get(k) for k in ("python", "torch", "cuda")}
    record["started"] = provenance.get("date") or record["started"]
    record["duration_s"] = float(provenance.get("duration_s") or 0.0)
    recorded_evidence = layout.root / "recordings" / target.id
    if recorded_evidence.is_dir():
        record["evidence"] = _evidence_record(layout, recorded_evidence)
    return record


async def _run_one(
    target: Target,
    layout: Layout,
    options: RunOptions,
    gpu_ok: Callable[[], bool],
    progress: Progress,
    semaphore: asyncio.Semaphore,
) -> Record:
    if target.not_reproducible is not None:
        return _base_record(target, layout, "not-reproducible", None)
    try:
        path = notebook_file(layout.root, target.notebook)
        notebook = _read_notebook_json(path)
    except (OSError, ValueError) as exc:
        record = _base_record(target, layout, "failed", None)
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        record["error"] = {"cell": -1, "source": "", "message": f"{target.notebook}: {reason}"}
        return record
    digest = source_hash(notebook, target.reproduction, scale=options.scale)
    if target.device == "gpu" and not gpu_ok():
        record = _recorded_gpu(target, layout, notebook, options.scale)
        progress(f"{target.id}: {record['status']} (no CUDA device on this host)")
        return record
    async with semaphore, _id_lock(layout, target.id):
        if not options.force:
            cached = _restore_cache(layout, target, digest)
            if cached is not None:
                progress(f"{target.id}: served from cache ({digest[:12]})")
                if options.record and target.device == "gpu":
                    progress(f"{target.id}: recorded to {write_recording(layout, cached)}")
                return cached
        progress(f"{target.id}: executing {target.notebook} (scale={options.scale})")
        record = await _execute(target, layout, options, digest, progress)
        if record["status"] == "passed":
            _store_cache(layout, record)
            if options.record and target.device == "gpu":
                saved = write_recording(layout, record)
                progress(f"{target.id}: recorded to {saved}")
        verdict = "passed" if record["status"] == "passed" else "FAILED"
        progress(f"{target.id}: {verdict} in {record['duration_s']:.1f} s")
        return record


def _write_manifest(layout: Layout, records: list[Record], targets: list[Target]) -> Manifest:
    """Write the records just made, plus earlier records of other notebooks that are still
    current (their notebook still hashes to the recorded source_hash)."""
    import fcntl

    layout.build.mkdir(parents=True, exist_ok=True)
    by_id = {t.id: t for t in targets}
    fresh = {r["id"] for r in records}
    with open(layout.build / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous: list[Record] = []
        with contextlib.suppress(OSError, ValueError, AttributeError):
            old = json.loads(layout.manifest.read_text(encoding="utf-8"))
            previous = [r for r in old.get("notebooks", []) if isinstance(r, dict)]
        kept = [
            r
            for r in previous
            if r.get("id") not in fresh
            and r.get("id") in by_id
            and _still_current(layout, r, by_id[r["id"]])
        ]
        manifest = {
            "version": MANIFEST_VERSION,
            "generated": _now(),
            "toolkit_version": __version__,
            "notebooks": sorted([*kept, *records], key=lambda r: r["id"]),
        }
        _atomic_write(layout.manifest, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _still_current(layout: Layout, record: Record, target: Target) -> bool:
    if target.not_reproducible is not None:
        return record.get("status") == "not-reproducible"
    try:
        notebook = _read_notebook_json(layout.root / target.notebook)
    except (OSError, ValueError):
        return False
    return any(
        source_hash(notebook, target.reproduction, scale) == record.get("source_hash")
        for scale in SCALES
    )


def reproduce(
    root: Path | str,
    ids: Iterable[str] | None = None,
    force: bool = False,
    jobs: int = 1,
    scale: str = "ci",
    *,
    cell_timeout: float = DEFAULT_CELL_TIMEOUT,
    timeout: float = DEFAULT_TIMEOUT,
    build: Path | str | None = None,
    progress: Progress | None = None,
    record: bool = False,
) -> Manifest:
    """Run (or serve from cache) the reproduction notebooks and write build/manifest.json.

    Returns the manifest. Raises ReproduceError for bad input (unknown id, bad scale)."""
    root = Path(root).resolve()
    if scale not in SCALES:
        raise ReproduceError(f"--scale must be one of {', '.join(SCALES)}, not {scale!r}")
    layout = Layout(root, Path(build).resolve() if build else root / "build")
    targets = discover(root, ids)
    options = RunOptions(
        scale=scale, cell_timeout=cell_timeout, timeout=timeout, force=force, record=record
    )
    say = progress or (lambda _line: None)
    # Asked once, before any kernel starts (it imports torch in a subprocess: seconds).
    needs_gpu = any(t.device == "gpu" and t.not_reproducible is None for t in targets)
    has_cuda = cuda_available() if needs_gpu else False

    def gpu_ok() -> bool:
        return has_cuda

    with reaping():
        records = asyncio.run(_run_all(targets, layout, options, gpu_ok, say, max(1, jobs)))
    return _write_manifest(layout, records, discover(root))


async def _run_all(
    targets: list[Target],
    layout: Layout,
    options: RunOptions,
    gpu_ok: Callable[[], bool],
    progress: Progress,
    jobs: int,
) -> list[Record]:
    semaphore = asyncio.Semaphore(jobs)
    loop = asyncio.get_running_loop()
    tasks = [
        asyncio.ensure_future(_run_one(t, layout, options, gpu_ok, progress, semaphore))
        for t in targets
    ]

    def interrupt() -> None:
        options.interrupted = True
        for task in tasks:
            task.cancel()

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupt)
        loop.add_signal_handler(signal.SIGTERM, interrupt)
    try:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    if any(isinstance(r, asyncio.CancelledError) for r in results):
        raise KeyboardInterrupt
    records: list[Record] = []
    for target, result in zip(targets, results, strict=True):
        if isinstance(result, BaseException):
            record = _base_record(target, layout, "failed", None)
            record["error"] = {
                "cell": -1,
                "source": "",
                "message": f"trainwreck reproduce: {type(result).__name__}: {result}",
            }
            records.append(record)
        else:
            records.append(result)
    return records


# --- command line --------------------------------------------------------------------------------


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="entry ids (default: all)")
    parser.add_argument("--force", action="store_true", help="re-run even when cached")
    parser.add_argument(
        "-j", "--jobs", type=int, default=1, metavar="N", help="notebooks run in parallel"
    )
    parser.add_argument(
        "--scale", choices=SCALES, default="ci", help="ci: ~45 s on 2 cores; full: larger"
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="on a CUDA host: save passed GPU notebooks with their evidence to recordings/ "
        "(commit them; hosts without a GPU then show these runs)",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=DEFAULT_CELL_TIMEOUT,
        metavar="S",
        help=f"seconds one cell may run (default {DEFAULT_CELL_TIMEOUT:g})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds one notebook may run (default {DEFAULT_TIMEOUT:g})",
    )


def format_failure(record: Record) -> str:
    error = record.get("error") or {}
    where = f"{record['notebook'] or record['id']}"
    cell = error.get("cell", -1)
    lines = [f"FAILED {record['id']} ({where})"]
    if isinstance(cell, int) and cell >= 0:
        lines[0] += f", cell {cell}:"
        source = _first_lines(error.get("source", ""))
        lines.extend("    | " + line for line in source.splitlines())
    lines.append(f"  {error.get('message', 'unknown error')}")
    if error.get("output"):
        lines.append("  the cell printed (last lines):")
        lines.extend("    > " + line for line in str(error["output"]).splitlines())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    if args.jobs < 1:
        print("trainwreck: -j must be at least 1", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        manifest = reproduce(
            args.root,
            args.ids or None,
            force=args.force,
            jobs=args.jobs,
            scale=args.scale,
            cell_timeout=args.cell_timeout,
            timeout=args.timeout,
            progress=progress,
            record=getattr(args, "record", False),
        )
    except ReproduceError as exc:
        print(f"trainwreck: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # build/ not writable, disk full: one line, not a traceback
        print(f"trainwreck: {exc.filename or 'build/'}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(
            f"trainwreck: reproduce needs the repro extra ({exc.name} is missing): "
            "pip install 'trainwreck[repro]'",
            file=sys.stderr,
        )
        return 2
    wanted = set(args.ids) if args.ids else None
    records = [r for r in manifest["notebooks"] if wanted is None or r["id"] in wanted]
    failed = [r for r in records if r["status"] == "failed"]
    for record in records:
        status = record["status"] + (" (cached)" if record.get("cached") else "")
        line = f"{status:<22} {record['id']}"
        if record["status"] in ("passed", "failed"):
            line += f"  {record['duration_s']:.1f} s"
        if record["status"] == "stale":
            line += f"  ({record['error']['message']})"
        print(line)
    for record in failed:
        print(format_failure(record), file=sys.stderr)
    print(
        f"{len(records)} notebooks, {len(failed)} failed, "
        f"{time.monotonic() - started:.1f} s; manifest: build/manifest.json",
        file=sys.stderr,
    )
    return 1 if failed else 0
