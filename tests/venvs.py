"""Fresh virtual environments with only trainwreck's core install, built offline.

Used by the tests that install wheels the way a user does (a rule pack, the composite action,
a compiled rule wheel): the venv sees the core dependencies through links into this environment
(`make_core_site`) and trainwreck as its own wheel, built without the network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The core install's dependencies and theirs: all a fresh core-only venv may see.
CORE = [
    "pyyaml",
    "jsonschema",
    "attrs",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "typing-extensions",
    "numpy",
    "google-re2",
]


def make_core_site(target: Path) -> None:
    """A folder exposing only the core dependencies (links into this environment), so the fresh
    venv needs no network and sees nothing else (no torch, no jupyter, no mkdocs)."""
    target.mkdir()
    for name in CORE:
        dist = metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            source = Path(dist.locate_file(top))
            if source.exists() and not (target / top).exists() and top != "..":
                (target / top).symlink_to(source)


def _pip_wheel(out: Path) -> subprocess.CompletedProcess[bytes]:
    """`pip wheel` of this checkout into `out`: no dependencies, no build isolation, no index."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    return subprocess.run(
        [*command, "--no-index", "-q", "-w", str(out), str(ROOT)], capture_output=True
    )


def trainwreck_wheel(out: Path) -> Path:
    """This checkout as a wheel (hatchling from the dev extra; no build isolation, no index)."""
    pytest.importorskip("hatchling", reason="the dev extra (hatchling) builds the wheel offline")
    _pip_wheel(out).check_returncode()
    return next(out.glob("trainwreck-*.whl"))


def core_venv(env_dir: Path, core_site: Path) -> Path:
    """A venv at env_dir whose only packages are the core dependencies; returns its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    if not core_site.exists():
        make_core_site(core_site)
    (purelib(python) / "core-deps.pth").write_text(str(core_site) + "\n")
    return python


def purelib(python: Path) -> Path:
    """The site-packages folder of the venv whose interpreter is `python`."""
    return Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )


def install_trainwreck(python: Path, wheels: Path) -> None:
    """Install this checkout alone into the venv: its wheel built offline when the build backend
    is at hand, otherwise the package files copied in as that wheel would lay them out."""
    built = _pip_wheel(wheels)
    if built.returncode == 0:
        pip_install(python, next(wheels.glob("trainwreck-*.whl")), deps=False)
        return
    target = purelib(python)
    shutil.copytree(
        ROOT / "src" / "trainwreck",
        target / "trainwreck",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(ROOT / "schemas", target / "trainwreck" / "schemas")


def pip_install(python: Path, *wheels: Path, deps: bool = True) -> None:
    """Install wheels into the venv offline (dependencies must already be there: the core
    site's links satisfy them)."""
    no_deps = [] if deps else ["--no-deps"]
    subprocess.run(
        [str(python), "-m", "pip", "install", *no_deps, "--no-index", "-q", *map(str, wheels)],
        check=True,
        capture_output=True,
    )
