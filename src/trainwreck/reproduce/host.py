"""Facts about the machine a notebook ran on: CPU model, GPU and driver, CUDA, the time.

torch is never imported here: whether CUDA works is asked of a subprocess, and the kernel's own
versions are printed by a hidden last cell (`VERSIONS_CODE`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import subprocess
import sys
from pathlib import Path


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


# The device nodes a CUDA (or ROCm, or WSL2 GPU) driver needs on Linux: without any of them
# torch.cuda.is_available() is False, and asking torch costs seconds of import.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def cuda_available(python: str = sys.executable, timeout: float = 120.0) -> bool:
    """torch.cuda.is_available(), asked of a subprocess so this process never imports torch
    (not asked at all on a Linux host with no GPU device node)."""
    if sys.platform.startswith("linux") and not any(map(os.path.exists, GPU_DEVICE_NODES)):
        return False
    try:
        result = subprocess.run(
            [python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
            capture_output=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# Printed by the last, hidden cell so the manifest records the kernel's own versions.
VERSIONS_MARKER = "__TRAINWRECK_VERSIONS__"

# Runs as the hidden last cell: versions as the kernel sees them, cheaply (torch is not imported
# just for this; its version.py is read when the notebook did not import it).
VERSIONS_CODE = f"""
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
