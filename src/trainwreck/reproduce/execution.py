"""Executing one notebook in a fresh Jupyter kernel, cell by cell, under time limits.

The runner injects a cell after the `parameters`-tagged cell (papermill's convention) that sets
`scale` and `evidence_dir`, runs each code cell with a timeout per cell and per notebook, and on
timeout, interrupt or completion kills the kernel and every process it started. nbclient and
nbformat are imported where used.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trainwreck import __version__
from trainwreck.reproduce.host import VERSIONS_CODE, VERSIONS_MARKER, gpu_facts
from trainwreck.reproduce.layout import Layout, atomic_write, base_record, evidence_files
from trainwreck.reproduce.processes import TOKEN_VARIABLE, kill_tree
from trainwreck.reproduce.records import Host, RunError, RunRecord, Status, Versions, status_word
from trainwreck.reproduce.source import cell_source, read_notebook_json
from trainwreck.reproduce.targets import Target

DEFAULT_CELL_TIMEOUT = 600.0
DEFAULT_TIMEOUT = 1800.0
HEARTBEAT_S = 20.0

Progress = Callable[[str], None]


@dataclass
class RunOptions:
    scale: str = "ci"
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    timeout: float = DEFAULT_TIMEOUT
    force: bool = False
    record: bool = False  # save passed GPU runs to recordings/ (to be committed)
    interrupted: bool = False  # set by SIGINT/SIGTERM; running notebooks stop and are killed


class _NotebookTimeout(Exception):
    pass


def first_lines(source: str, n: int = 3) -> str:
    lines = source.strip("\n").splitlines()
    text = "\n".join(lines[:n])
    return text + ("\n..." if len(lines) > n else "")


def _printed_tail(cell: Any, n: int = 12) -> str:
    """The last lines a failed cell printed: a bare assertion says little without them, and a CI
    log is often all there is of a failure that does not happen again."""
    text = "".join(
        str(out.get("text", ""))
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )
    return "\n".join(text.rstrip("\n").splitlines()[-n:])


def prepare(nb: Any, params: dict[str, Any]) -> tuple[Any, list[int]]:
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


async def execute(
    target: Target,
    layout: Layout,
    options: RunOptions,
    digest: str,
    progress: Progress,
) -> RunRecord:
    """Run the target's notebook; the record says passed or why it failed. Whatever happens
    (a failure, a timeout, an interrupt), the kernel and its processes are killed and the
    executed notebook is written with its provenance."""
    import nbformat
    from nbclient import NotebookClient

    record = base_record(target, layout, Status.FAILED, digest)
    started = time.monotonic()
    evidence = layout.evidence(target.id)
    evidence_rel = layout.rel(evidence)
    shutil.rmtree(evidence, ignore_errors=True)
    evidence.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(layout.root / target.notebook, as_version=4)
    nb, mapping = prepare(nb, {"scale": options.scale, "evidence_dir": evidence_rel})
    client = NotebookClient(
        nb,
        timeout=int(options.cell_timeout),
        kernel_name="python3",
        resources={"metadata": {"path": str(layout.root)}},
        record_timing=True,
    )
    client.create_kernel_manager()
    run = _KernelRun(target, layout, options, progress, client, nb, mapping, started)
    try:
        await run.run()
    finally:
        await run.stop()
        error = run.error
        if error is not None and error.source == "" and error.cell is not None and error.cell >= 0:
            error = dataclasses.replace(
                error, source=_source_of(layout.root / target.notebook, error.cell)
            )
        record = dataclasses.replace(
            record,
            duration_s=round(time.monotonic() - started, 2),
            error=error,
            status=Status.PASSED if error is None else Status.FAILED,
        )
        record = _finish_record(record, layout, target, nb, run.versions, options)
    return record


class _KernelRun:
    """The state one execution's steps share: the client, the cell running now, the kernel's
    process ids, and the error that ended it."""

    def __init__(
        self,
        target: Target,
        layout: Layout,
        options: RunOptions,
        progress: Progress,
        client: Any,
        nb: Any,
        mapping: list[int],
        started: float,
    ) -> None:
        self.target, self.layout, self.options, self.progress = target, layout, options, progress
        self.client, self.nb, self.mapping = client, nb, mapping
        self.started = started
        self.deadline = started + options.timeout
        self.cell = -1  # the source index of the cell running now (-1: the injected one, none)
        self.since = started
        self.pid: int | None = None
        self.pgid: int | None = None
        self.token = uuid.uuid4().hex
        self.versions: dict[str, Any] = {}
        self.error: RunError | None = None
        self.kernel_log = layout.kernel_log(target.id)
        self.log_handle: IO[bytes] | None = None
        self.beat = asyncio.ensure_future(self._heartbeat())

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if self.cell >= 0:
                self.progress(
                    f"{self.target.id}: still in cell {self.cell} "
                    f"({time.monotonic() - self.since:.0f} s in cell, "
                    f"{time.monotonic() - self.started:.0f} s total)"
                )

    async def run(self) -> None:
        try:
            await self._start_kernel()
            kernel_busy = await self._run_cells()
            if self.options.interrupted:
                # nbclient turns the cancellation of a running cell into DeadKernelError.
                raise asyncio.CancelledError
            if not kernel_busy:
                self.versions = await _kernel_versions(self.client, self.nb)
        except _NotebookTimeout:
            self.error = RunError(
                self.cell, "", f"notebook exceeded its {self.options.timeout:g} s limit"
            )
        except asyncio.CancelledError:
            self.error = RunError(self.cell, "", "interrupted")
            raise
        except Exception as exc:  # kernel failed to start, zmq trouble: a notebook failure
            self.error = RunError(self.cell, "", f"{type(exc).__name__}: {exc}")

    async def _start_kernel(self) -> None:
        env = dict(os.environ)
        # Plots render inline and files are written; no display is needed.
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        env["PYTHONUNBUFFERED"] = "1"
        env["TRAINWRECK_REPRODUCE"] = "1"
        env[TOKEN_VARIABLE] = self.token
        # The kernel's own stdout/stderr (ipykernel warnings, crashes of C code) go to a log
        # file, not into the progress output of this command.
        self.kernel_log.parent.mkdir(parents=True, exist_ok=True)
        self.log_handle = open(self.kernel_log, "wb")  # noqa: SIM115 - closed in stop()
        await self.client.async_start_new_kernel(
            cwd=str(self.layout.root), env=env, stdout=self.log_handle, stderr=self.log_handle
        )
        provisioner = getattr(self.client.km, "provisioner", None)
        self.pid = getattr(provisioner, "pid", None)
        self.pgid = getattr(provisioner, "pgid", None)
        await self.client.async_start_new_kernel_client()

    async def _run_cells(self) -> bool:
        """Each non-empty code cell in turn, up to the first that fails (its error is kept).
        True when the kernel is left busy or dead, so it must not be asked anything more."""
        code_total = sum(1 for c in self.nb.cells if c.cell_type == "code")
        execution_count = 0
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            execution_count += 1
            remaining = self.deadline - time.monotonic()
            if remaining <= 1:
                raise _NotebookTimeout()
            self.client.timeout = max(1, int(min(self.options.cell_timeout, remaining)))
            notebook_limited = remaining < self.options.cell_timeout
            self.cell, self.since = self.mapping[index], time.monotonic()
            label = "injected parameters" if self.cell < 0 else f"cell {self.cell}"
            self.progress(
                f"{self.target.id}: {label} ({execution_count}/{code_total} code cells, "
                f"{time.monotonic() - self.started:.1f} s)"
            )
            self.error, kernel_busy = await self._execute_cell(
                cell, index, execution_count, notebook_limited
            )
            if self.error is not None:
                return kernel_busy
        return False

    async def _execute_cell(
        self, cell: Any, index: int, execution_count: int, notebook_limited: bool
    ) -> tuple[RunError | None, bool]:
        """(the cell's error or None, whether the kernel is left busy or dead)."""
        from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

        try:
            await self.client.async_execute_cell(cell, index, execution_count=execution_count)
        except CellTimeoutError:
            message = (
                f"notebook exceeded its {self.options.timeout:g} s limit"
                if notebook_limited
                else f"cell timed out after {self.client.timeout} s"
            )
            return RunError(self.cell, cell.source, message), True
        except CellExecutionError as exc:
            message = f"{exc.ename}: {exc.evalue}" if exc.ename else str(exc)
            printed = _printed_tail(cell)
            return RunError(self.cell, cell.source, message, printed or None), False
        except DeadKernelError:
            message = (
                "the kernel died (killed, crashed or out of memory); its "
                f"output is in {self.layout.rel(self.kernel_log)}"
            )
            return RunError(self.cell, cell.source, message), True
        return None, False

    async def stop(self) -> None:
        self.beat.cancel()
        kill_tree(self.pid, self.pgid, self.token)
        await _cleanup_client(self.client)
        if self.log_handle is not None:
            self.log_handle.close()


async def _kernel_versions(client: Any, nb: Any) -> dict[str, Any]:
    import nbformat

    cell = nbformat.v4.new_code_cell(VERSIONS_CODE)
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
        return cell_source(read_notebook_json(path)["cells"][index])
    except (OSError, ValueError, IndexError, KeyError):
        return ""


def _finish_record(
    record: RunRecord,
    layout: Layout,
    target: Target,
    nb: Any,
    versions: dict[str, Any],
    options: RunOptions,
) -> RunRecord:
    """The record with this host's GPU, the kernel's versions and the evidence; the executed
    notebook is written with the same facts as its provenance."""
    import nbformat

    gpu, driver = gpu_facts()
    record = dataclasses.replace(
        record,
        host=Host(record.host.cpu, gpu or versions.get("gpu"), driver),
        versions=Versions(versions.get("python"), versions.get("torch"), versions.get("cuda")),
        evidence=evidence_files(layout, layout.evidence(target.id)),
    )
    executed = layout.executed(target.id)
    executed.parent.mkdir(parents=True, exist_ok=True)
    nb.metadata.setdefault("trainwreck", {})
    nb.metadata["trainwreck"]["provenance"] = {
        "source_hash": record.source_hash,
        "scale": options.scale,
        "status": status_word(record.status),
        "host": record.host.cpu,
        "gpu": record.host.gpu,
        "driver": record.host.driver,
        "versions": record.versions.to_json(),
        "date": record.started,
        "duration_s": record.duration_s,
        "toolkit_version": __version__,
    }
    atomic_write(executed, nbformat.writes(nb))
    return dataclasses.replace(record, executed=layout.rel(executed))
