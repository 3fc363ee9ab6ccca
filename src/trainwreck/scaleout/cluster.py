"""The scan as Dask tasks (`trainwreck diagnose --dask [ADDRESS]`; the `dask` extra).

The plan is the parallel scan's (parallel.plan_tasks): consecutive small files share a task, a
large plain file is cut into byte ranges where a serial scan starts a block. The rules reach
each worker once, in a worker plugin; a worker's threads each compile them into an Engine on
their first task (compiled RE2 objects neither pickle nor share a scan). A task returns its scan
state in the saved format (engine.partial: no pickle of engine objects), and the client merges
the states in input order, so the findings are those of a serial scan. A task that fails is
retried (RETRIES); one that still fails leaves its files in the report's skipped list.

Inputs may be fsspec URLs (s3://, gs://, hdfs://...) when the matching fsspec backend is
installed on the client and the workers; they are read whole (not cut into ranges).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from distributed import Client, LocalCluster, WorkerPlugin

from trainwreck.engine import parallel, partial
from trainwreck.engine.lineinfo import rank_number
from trainwreck.engine.scanning import Engine
from trainwreck.engine.state import ScanResult
from trainwreck.errors import UsageError
from trainwreck.findings import Skipped

RETRIES = 2  # further tries of a failed task (a worker lost, a read that failed)
Inputs = list[tuple[str, Any]]

# In a worker process: the rules each plugin brought, by digest; per thread, their engines.
_RULES: dict[str, list[dict[str, Any]]] = {}
_THREAD = threading.local()


class RulesPlugin(WorkerPlugin):
    """Brings the rules to every worker (once, also to workers that join later)."""

    idempotent = True  # registering the same rules again is a no-op

    def __init__(self, rules: list[dict[str, Any]], digest: str):
        self.rules = rules
        self.digest = digest
        self.name = f"trainwreck-rules-{digest[:16]}"

    def setup(self, worker: Any) -> None:
        _RULES[self.digest] = self.rules


def worker_engine(digest: str) -> Engine:
    """This thread's engine of the rules of `digest` (compiled on its first task)."""
    engines: dict[str, Engine] = _THREAD.__dict__.setdefault("engines", {})
    engine = engines.get(digest)
    if engine is None:
        rules = _RULES.get(digest)
        if rules is None:
            raise RuntimeError(f"the rules {digest[:12]} did not reach this worker")
        engine = engines[digest] = Engine(rules)
    return engine


def scan_task(digest: str, task: parallel.Task, budget: int) -> bytes:
    """Scan one task's files (or one byte range of a file) on a worker; its saved state."""
    engine = worker_engine(digest)
    engine.series_budget = budget
    result = ScanResult(engine.new_runs(), [], [], set(), 0, 0)
    ranges: list[tuple[int, int] | None] = []
    for local_id, (_, display, source, piece) in enumerate(task):
        result.files.append(display)
        ranges.append((piece[0], piece[1]) if piece is not None else None)
        engine.scan_range(_opened(source), display, local_id, piece, into=result)
    return partial.dump(result, digest, ranges)


def _peak_rss_mib() -> float:
    """This worker process's peak resident memory so far (MiB; Linux counts KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _opened(source: Any) -> Any:
    """A local path as it is; a URL opened through fsspec (a binary stream)."""
    if isinstance(source, str) and "://" in source:
        import fsspec

        return fsspec.open(source, "rb").open()
    return source


def expand_urls(urls: list[str]) -> Inputs:
    """The files an fsspec URL names: itself, the files under it (a folder), or a glob's."""
    try:
        import fsspec
    except ImportError:
        raise UsageError("URLs need fsspec: pip install fsspec and its backend") from None
    found: Inputs = []
    for url in urls:
        try:
            fs, path = fsspec.core.url_to_fs(url)
            if any(ch in path for ch in "*?["):
                paths = sorted(fs.glob(path))
            elif fs.isdir(path):
                paths = sorted(fs.find(path))
            else:
                paths = [path]
        except (ImportError, ValueError) as exc:  # no backend for the protocol
            raise UsageError(f"{url}: {str(exc).splitlines()[0]}") from None
        except OSError as exc:
            raise UsageError(f"{url}: cannot list ({exc})") from None
        for item in paths:
            name = fs.unstrip_protocol(item)
            found.append((name, name))
    return found


class DaskScanner:
    """diagnose's scan on a Dask cluster: the scheduler at `address`, or a LocalCluster of
    `workers` workers (default: one per usable CPU), each one thread."""

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        processes: bool = True,
        retries: int = RETRIES,
    ):
        if workers is not None and workers < 1:
            raise UsageError(f"--dask-workers {workers}: must be 1 or more")
        self.address = address
        self.workers = workers
        self.processes = processes
        self.retries = retries
        self.peak_rss_mib: dict[str, float] = {}  # per worker, after a scan (the benchmark)

    def expand(self, urls: list[str]) -> Inputs:
        return expand_urls(urls)

    def _client(self) -> tuple[Client, LocalCluster | None]:
        if self.address:
            try:
                return Client(self.address, timeout="30s"), None
            except (OSError, TimeoutError, ValueError) as exc:
                raise UsageError(
                    f"--dask {self.address}: cannot reach the scheduler ({exc})"
                ) from None
        cluster = LocalCluster(
            n_workers=self.workers or parallel.usable_cpus(),
            threads_per_worker=1,
            processes=self.processes,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        return Client(cluster), cluster

    def scan(self, engine: Engine, rules: list[dict[str, Any]], inputs: Inputs) -> Any:
        if any(not isinstance(source, str) or source == "-" for _, source in inputs):
            raise UsageError("--dask reads files and URLs only (not stdin or streams)")
        client, cluster = self._client()
        try:
            result = self._scan(client, engine, rules, inputs)
            self.peak_rss_mib = client.run(_peak_rss_mib)
            return result, inputs
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    def _scan(
        self, client: Client, engine: Engine, rules: list[dict[str, Any]], inputs: Inputs
    ) -> ScanResult:
        digest = partial.rules_digest(rules)
        client.register_plugin(RulesPlugin(rules, digest))
        workers = max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
        budget = engine.series_budget // workers
        merged = partial.new_merge(engine)
        submitted = []
        for task, ranks in parallel.plan_tasks(engine, inputs, workers):
            for hit in ranks:  # (those a serial scan samples from a cut file's blocks)
                merged.result.admit_rank(rank_number(hit))
            future = client.submit(
                scan_task, digest, task, budget, retries=self.retries, pure=False
            )
            submitted.append((task, future))
        failed_file = -1
        for task, future in submitted:
            first_file = task[0][0]
            if first_file == failed_file:
                continue  # an earlier part of this file failed: reported cut short there
            try:
                data = future.result()
            except Exception as exc:  # still failing after its retries
                self._lost(merged, task, exc)
                failed_file = first_file
                continue
            partial.merge_into(merged, partial.load(data, "a Dask task's state"), engine)
        return merged.result

    @staticmethod
    def _lost(merged: partial.Merged, task: parallel.Task, exc: Exception) -> None:
        """Report a task's files skipped, keeping their places (file ids) in the merge."""
        result = merged.result
        what = "was cut short" if task[0][3] is not None else "could not be scanned"
        for file_id, display, _, _ in task:
            if file_id >= len(result.files):
                result.files.append(display)
                merged.ranges.append(None)
            result.skipped.append(Skipped(display, f"{what} on Dask ({exc!r}); skipped"))
