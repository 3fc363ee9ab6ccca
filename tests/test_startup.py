"""What `trainwreck diagnose` pays for at every start: numpy's BLAS held to one thread, and a
serial scan of a bundle that imports neither the process pool nor the installed-pack lookup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

PROBE = """
import os, sys
from trainwreck import cli
cli.load_numpy_with_one_blas_thread()
print(len(os.listdir("/proc/self/task")), "OPENBLAS_NUM_THREADS" in os.environ)
"""


def run(code: str, **env: str) -> str:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "PYTHONPATH": SRC, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_numpy_loads_with_one_blas_thread_and_the_environment_is_left_as_it_was() -> None:
    assert run(PROBE) == "1 False"


def test_a_thread_count_the_user_chose_is_kept() -> None:
    assert run(PROBE, OPENBLAS_NUM_THREADS="2").endswith("True")


def test_a_serial_diagnose_imports_no_process_pool_nor_package_metadata(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.5\n")
    code = f"""
import sys
from trainwreck import cli
try:
    cli.main(["diagnose", "--no-installed", "--rules", "{Path(SRC).parent / "rules"}", "--jobs", "1", "{log}"])
except SystemExit:
    pass
print(sorted(m for m in ("concurrent.futures.process", "importlib.metadata", "trainwreck.forensics.analysis") if m in sys.modules))
"""
    assert run(code).splitlines()[-1] == "[]"
