"""torchrun-child-failed-root-cause: the log reader finds the root-cause rank's own exception under a
ChildFailedError summary, and a @record entrypoint writes the failing rank's exception to the error file
torchrun's agent reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.examples.harness import REPO, example, run, run_ranks

ENTRY = "torchrun-child-failed-root-cause"
LOGS = REPO / "tests" / "logs" / ENTRY


def test_the_reader_prints_the_root_cause_ranks_exception(tmp_path: Path) -> None:
    shutil.copy(LOGS / "torch213-4ranks-no-record.log", tmp_path / "torchrun.log")
    result = run(example(ENTRY, "code_examples[0]"), tmp_path)
    assert result.returncode == 0, result.output
    assert "root cause: rank 2" in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("[rank2]: FileNotFoundError"), result.stdout


def test_the_reader_says_when_the_summary_is_all_there_is(tmp_path: Path) -> None:
    shutil.copy(LOGS / "summary-only-pasted.log", tmp_path / "torchrun.log")
    result = run(example(ENTRY, "code_examples[0]"), tmp_path)
    assert result.returncode == 0, result.output
    assert "root cause: rank 3" in result.stdout
    assert "no [rankN]: lines" in result.stdout


def _write_shards(cwd: Path, ranks: range) -> None:
    code = "import torch\n" + "".join(
        f"torch.save(torch.full((4,), {r + 1}.0), 'shard-{r}.pt')\n" for r in ranks
    )
    assert run(code, cwd, name="make_shards.py").returncode == 0


def test_the_recorded_job_runs_when_every_shard_is_there(tmp_path: Path) -> None:
    _write_shards(tmp_path, range(2))
    results = run_ranks(example(ENTRY, "code_examples[1]"), tmp_path, world_size=2)
    for result in results:
        assert result.returncode == 0, result.output
    assert "sum over shards 12.0" in results[0].stdout  # 4 x 1.0 + 4 x 2.0


def test_record_writes_the_missing_shard_error_to_the_error_file(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    results = run_ranks(
        example(ENTRY, "code_examples[1]"),
        tmp_path,
        world_size=1,
        env={"TORCHELASTIC_ERROR_FILE": str(error_file)},
    )
    assert results[0].returncode != 0
    data = json.loads(error_file.read_text())
    message = data["message"]
    assert "FileNotFoundError" in message["message"], message
    assert "shard-0.pt" in message["extraInfo"]["py_callstack"]
    assert int(message["extraInfo"]["timestamp"]) > 0
