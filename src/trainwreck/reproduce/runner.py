"""`reproduce()`: run (or serve from cache) every target, in parallel, and write the manifest."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

from trainwreck.reproduce.cache import id_lock, restore_cache, store_cache
from trainwreck.reproduce.execution import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_TIMEOUT,
    Progress,
    RunOptions,
    execute,
)
from trainwreck.reproduce.host import cuda_available
from trainwreck.reproduce.layout import Layout, base_record
from trainwreck.reproduce.manifest import Manifest, write_manifest
from trainwreck.reproduce.processes import reaping
from trainwreck.reproduce.progress import NotebookEvent, NotebookEvents
from trainwreck.reproduce.recordings import recorded_gpu_record, write_recording
from trainwreck.reproduce.records import RunError, RunRecord, Status
from trainwreck.reproduce.source import SCALES, read_notebook_json, source_hash
from trainwreck.reproduce.targets import ReproduceError, Target, discover, notebook_file, pick


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
    events: NotebookEvents | None = None,
) -> Manifest:
    """Run (or serve from cache) the reproduction notebooks and write build/manifest.json.

    `events` hears each notebook start and end (`progress.ProgressLine` makes them one line).
    Returns the manifest. Raises ReproduceError for bad input (unknown id, bad scale)."""
    root = Path(root).resolve()
    if scale not in SCALES:
        raise ReproduceError(f"--scale must be one of {', '.join(SCALES)}, not {scale!r}")
    layout = Layout(root, Path(build).resolve() if build else root / "build")
    everything = discover(root)  # (the manifest lists every target, the run only `ids`)
    targets = pick(everything, ids)
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
        records = asyncio.run(
            _run_all(targets, layout, options, gpu_ok, say, max(1, jobs), events or _ignore)
        )
    return write_manifest(layout, records, everything)


def _ignore(_event: NotebookEvent) -> None:
    pass


async def _run_all(
    targets: list[Target],
    layout: Layout,
    options: RunOptions,
    gpu_ok: Callable[[], bool],
    progress: Progress,
    jobs: int,
    events: NotebookEvents,
) -> list[RunRecord]:
    semaphore = asyncio.Semaphore(jobs)
    loop = asyncio.get_running_loop()
    tasks = [
        asyncio.ensure_future(_run_one(t, layout, options, gpu_ok, progress, semaphore, events))
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
    records: list[RunRecord] = []
    for target, result in zip(targets, results, strict=True):
        if isinstance(result, BaseException):
            record = base_record(target, layout, Status.FAILED, None)
            message = f"trainwreck reproduce: {type(result).__name__}: {result}"
            records.append(dataclasses.replace(record, error=RunError(-1, "", message)))
        else:
            records.append(result)
    return records


async def _run_one(
    target: Target,
    layout: Layout,
    options: RunOptions,
    gpu_ok: Callable[[], bool],
    progress: Progress,
    semaphore: asyncio.Semaphore,
    events: NotebookEvents,
) -> RunRecord:
    record = await _run_target(target, layout, options, gpu_ok, progress, semaphore, events)
    error = ""
    if record.error is not None:
        cell = f"cell {record.error.cell}: " if (record.error.cell or -1) >= 0 else ""
        error = cell + (record.error.message or "")
    status = "cached" if record.cached else str(record.status)
    events(NotebookEvent(target.id, status, record.duration_s, error))
    return record


async def _run_target(
    target: Target,
    layout: Layout,
    options: RunOptions,
    gpu_ok: Callable[[], bool],
    progress: Progress,
    semaphore: asyncio.Semaphore,
    events: NotebookEvents,
) -> RunRecord:
    if target.not_reproducible is not None:
        return base_record(target, layout, Status.NOT_REPRODUCIBLE, None)
    try:
        path = notebook_file(layout.root, target.notebook)
        notebook = read_notebook_json(path)
    except (OSError, ValueError) as exc:
        record = base_record(target, layout, Status.FAILED, None)
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        error = RunError(-1, "", f"{target.notebook}: {reason}")
        return dataclasses.replace(record, error=error)
    digest = source_hash(notebook, target.reproduction, scale=options.scale)
    if target.device == "gpu" and not gpu_ok():
        record = recorded_gpu_record(target, layout, notebook, options.scale)
        progress(f"{target.id}: {record.status} (no CUDA device on this host)")
        return record
    async with semaphore, id_lock(layout, target.id):
        if not options.force:
            cached = restore_cache(layout, target, digest)
            if cached is not None:
                progress(f"{target.id}: served from cache ({digest[:12]})")
                if options.record and target.device == "gpu":
                    progress(f"{target.id}: recorded to {write_recording(layout, cached)}")
                return cached
        events(NotebookEvent(target.id, "running"))
        progress(f"{target.id}: executing {target.notebook} (scale={options.scale})")
        record = await execute(target, layout, options, digest, progress)
        if record.status is Status.PASSED:
            store_cache(layout, record)
            if options.record and target.device == "gpu":
                saved = write_recording(layout, record)
                progress(f"{target.id}: recorded to {saved}")
        verdict = "passed" if record.status is Status.PASSED else "FAILED"
        progress(f"{target.id}: {verdict} in {record.duration_s:.1f} s")
        return record
