"""Fresh virtual environments with only trainwreck's core install, built offline.

Used by the tests that install wheels the way a user does (a rule pack, the composite action):
the venv sees the core dependencies through links into this environment (see
test_compile_cli._core_site) and trainwreck as its own wheel, built without the network.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest
from test_compile_cli import _core_site

ROOT = Path(__file__).resolve().parents[1]


def trainwreck_wheel(out: Path) -> Path:
    """This checkout as a wheel (hatchling from the dev extra; no build isolation, no index)."""
    pytest.importorskip("hatchling", reason="the dev extra (hatchling) builds the wheel offline")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    return next(out.glob("trainwreck-*.whl"))


def core_venv(env_dir: Path, core_site: Path) -> Path:
    """A venv at env_dir whose only packages are the core dependencies; returns its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not core_site.exists():
        _core_site(core_site)
    Path(purelib, "core-deps.pth").write_text(str(core_site) + "\n")
    return python


def pip_install(python: Path, *wheels: Path) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "-q", *map(str, wheels)],
        check=True,
        capture_output=True,
    )
