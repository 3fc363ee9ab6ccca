"""Two versions of `trainwreck diagnose` side by side with ripgrep, round by round.

    python benchmarks/bench_before_after.py --before /tmp/base/src            # 50 MB cases
    python benchmarks/bench_before_after.py --before /tmp/base/src --size 20 --rounds 5

`--before` is the `src` folder of another checkout (say `git archive main | tar -x -C
/tmp/base`); the version after is this checkout's. Each round runs before, after and ripgrep
on the same log (bench_diagnose.py's step-heavy and sparse cases), so that on a shared, loaded
machine the two versions meet the same load; it prints the medians of CPU seconds, peak RSS and
the ratio to ripgrep taken round by round, and whether both versions found the same failures.
Both run with byte code written (the first run of each is a warm-up) and `--jobs 1`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import bench_diagnose as bench

ROOT = Path(__file__).resolve().parents[1]


def diagnose(src: Path, bundle: Path, log: Path) -> list[str]:
    return [
        *("env", "-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPATH={src}", sys.executable),
        *("-m", "trainwreck", "diagnose", "--format", "json", "--no-installed"),
        *("--rules", str(bundle), "--jobs", "1", str(log)),
    ]


def found(run: bench.Run | None) -> list[str] | None:
    if run is None or not run.out.strip():
        return None
    return sorted({finding["entry"] for finding in json.loads(run.out)["findings"]})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's src/")
    parser.add_argument("--size", type=float, default=50, help="MB per case (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (default 3)")
    args = parser.parse_args()
    subprocess.run(
        [sys.executable, "-m", "trainwreck", "compile", "--no-wheel", "--no-tests"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    bundle = ROOT / "build" / "rules" / "bundle.json"
    versions = {"before": args.before.resolve(), "after": ROOT / "src"}
    folder = Path(tempfile.mkdtemp(prefix="trainwreck-before-after-"))
    try:
        return compare(versions, bundle, folder, args.size, args.rounds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare(versions: dict[str, Path], bundle: Path, folder: Path, size: float, rounds: int) -> int:
    """Write the cases into `folder`, run them; 1 when the versions found different failures."""
    rust = folder / "patterns.rg"
    rust.write_text("\n".join(bench.to_rust(p) for p in bench.bundle_patterns(bundle)) + "\n")
    cases = {"step-heavy": folder / "step.log", "sparse": folder / "sparse.log"}
    bench.write_step_heavy(cases["step-heavy"], size)
    bench.write_sparse(cases["sparse"], size)
    for src in versions.values():
        bench.measure(diagnose(src, bundle, cases["sparse"]))  # warm-up: byte code written
    same = True
    for name, log in cases.items():
        runs: dict[str, list[bench.Run]] = {key: [] for key in [*versions, "rg"]}
        findings = {}
        for _ in range(rounds):
            for key, src in versions.items():
                run = bench.measure(diagnose(src, bundle, log))
                assert run is not None
                runs[key].append(run)
                findings[key] = found(run)
            ripgrep = bench.measure(["rg", "--no-config", "-c", "-f", str(rust), str(log)])
            assert ripgrep is not None
            runs["rg"].append(ripgrep)
        print(f"({name}) {size:g} MB, load average {os.getloadavg()[0]:.1f}")
        for key, measured in runs.items():
            cpu = statistics.median(run.cpu for run in measured)
            rss = max(run.rss for run in measured)
            line = f"  {key:7s} cpu {cpu:6.2f} s | peak RSS {rss:5.0f} MiB"
            if key in versions:
                ratios = [a.cpu / b.cpu for a, b in zip(measured, runs["rg"], strict=True)]
                line += f" | {statistics.median(ratios):.2f}x ripgrep (CPU, round by round)"
            print(line)
        agree = findings["before"] == findings["after"]
        same &= agree
        print(
            f"  found: {', '.join(findings['after'] or []) or 'none'}"
            + ("" if agree else f" (before: {', '.join(findings['before'] or []) or 'none'})")
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
