"""Run an entry's code example as the entry states it, in a fresh Python process.

    from tests.examples.harness import example, run, run_ranks

    code = example("torch-load-weights-only", "code_examples[0]")   # the code, read from the YAML
    result = run(code + DRIVER, tmp_path)                             # python file, cwd tmp_path
    assert result.returncode == 0, result.output

`example(...)` is also how `trainwreck check` knows an example has a test: it reads the string
arguments of the `example` calls in tests/examples/test_<entry_id>.py (knowledge/examples.py), and
an example marked `runs: cpu` without one is an error. A test adds only what the example leaves to
the reader (a model, a file to load) before it, and what checks its claim after it.

Every run is offline (no downloads) and has a timeout; distributed examples run with gloo on
`run_ranks`' processes, each with the RANK / WORLD_SIZE / MASTER_* variables torchrun sets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from trainwreck.knowledge.citations import code_blocks
from trainwreck.knowledge.examples import location
from trainwreck.model import load_entry

REPO = Path(__file__).resolve().parents[2]
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "CUDA_VISIBLE_DEVICES": "",  # a CPU example must not pick up a GPU where one exists
}


def example(entry_id: str, where: str) -> str:
    """The code of the example at `where` ("code_examples[0]", "fix.primary.steps[1]") in
    entries/<entry_id>.yaml, exactly as the entry states it."""
    entry = load_entry(REPO / "entries" / f"{entry_id}.yaml", REPO)
    for block in code_blocks(entry.data):
        if location(block) == where:
            return block.code
    raise LookupError(f"entries/{entry_id}.yaml has no code at {where}")


def runs_marker(entry_id: str, where: str) -> str | None:
    entry = load_entry(REPO / "entries" / f"{entry_id}.yaml", REPO)
    for block in code_blocks(entry.data):
        if location(block) == where:
            return block.runs
    raise LookupError(f"entries/{entry_id}.yaml has no code at {where}")


def inside(fragment: str, template: str) -> str:
    """`template` with the fragment in place of the line `FRAGMENT` (indented to match), for
    examples that are the body of a loop or a function."""
    lines = template.splitlines(True)
    for index, line in enumerate(lines):
        if line.strip() == "FRAGMENT":
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = textwrap.indent(fragment.rstrip("\n") + "\n", indent)
            return "".join(lines)
    raise ValueError("the template has no FRAGMENT line")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr[-6000:]}"


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {**os.environ, **OFFLINE, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def run(
    code: str,
    cwd: Path,
    *,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    name: str = "example.py",
) -> Result:
    """Run `code` as a script in `cwd` (its own process, so each example starts clean)."""
    script = cwd / name
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(env),
    )
    return Result(done.returncode, done.stdout, done.stderr)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Each rank runs the example through this runner. With torch 2.13 a gloo worker thread can release the
# last collective's tensors after the interpreter has begun shutting down, and the rank then aborts
# (SIGABRT, "terminate called without an active exception"; seen in CI, and 7 of 30 two-rank runs here
# when a DDP model outlives destroy_process_group). An example that finished normally therefore ends with
# its output flushed and without interpreter teardown; one that raised exits the usual way.
RANK_MAIN = """\
import os, runpy, sys

path = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(path))
runpy.run_path(path, run_name="__main__")
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def run_ranks(
    code: str,
    cwd: Path,
    *,
    world_size: int = 2,
    timeout: float = 180,
    env: dict[str, str] | None = None,
) -> list[Result]:
    """Run `code` as `world_size` ranks of one job on this host, as torchrun would start them."""
    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    port = str(free_port())
    processes = []
    for rank in range(world_size):
        rank_env = {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            **(env or {}),
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK_MAIN, str(script)],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(rank_env),
            )
        )
    results = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=timeout)
            results.append(Result(process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def keyword_checks(code: str, call: str, target: str) -> str:
    """Assertions that `target`, built by `call(...)` in `code`, holds each literal keyword value
    the code passes (what the example says it configures)."""
    import ast

    lines = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == call:
            for keyword in node.keywords:
                try:
                    value = ast.literal_eval(keyword.value)
                except ValueError:
                    continue
                lines.append(
                    f"assert {target}.{keyword.arg} == {value!r}, "
                    f"({keyword.arg!r}, {target}.{keyword.arg})"
                )
    if not lines:
        raise ValueError(f"no literal keywords of {call}(...) in the code")
    return "\n" + "\n".join(lines) + "\nprint('configured')\n"
