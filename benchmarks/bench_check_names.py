"""Benchmark `trainwreck check` with the library lookups (issue 26), cold and warm.

    python benchmarks/bench_check_names.py [ROUNDS]

Runs `trainwreck check` on the checkout's entries with an empty cache (every library asked in its
own process, every library's files scanned for environment variables), then ROUNDS times (default
2) with that cache filled, and prints each wall time, the load average and the number of names
looked up per library. The cold run is paid once per set of installed library versions; the warm
one on every check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def check(cache: str) -> float:
    env = {**os.environ, "TRAINWRECK_CACHE_DIR": cache, "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainwreck", "check", "--root", str(ROOT)],
        env=env,
        capture_output=True,
        check=False,
        timeout=1800,
    )
    return time.perf_counter() - start


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with tempfile.TemporaryDirectory(prefix="bench-check-") as cache:
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        print(f"cold: {check(cache):.1f} s")
        for index in range(rounds):
            print(f"warm {index + 1}: {check(cache):.1f} s")
        for path in sorted((Path(cache) / "shared" / "libraries").glob("*-names.json")):
            data = json.loads(path.read_text())
            print(f"  {path.name}: {len(data['names'])} names, {len(data['callees'])} callables")
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
