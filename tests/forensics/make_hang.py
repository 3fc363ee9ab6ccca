"""Make the hang regression inputs: a real 3-rank gloo job on CPU where rank 2 never joins an
all_reduce, with every rank's Flight Recorder dump (pickle and JSON) and stack (py-spy when it is
installed, faulthandler always) taken while the job hangs.

    python tests/forensics/make_hang.py OUT_DIR [--py-spy PATH]

Needs torch (the `repro` extra); the parent launches the ranks the way torchrun does (one process
each), waits until all are blocked, dumps the stacks from outside with py-spy, then tells every
rank to write its Flight Recorder dump and faulthandler stack and exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

WORLD = 3
CULPRIT = 2
STEPS = 5


def rank_main(rank: int, out: Path, port: int) -> None:
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # read when the process group starts
    import faulthandler
    import threading

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    grads = torch.ones(16)
    for _ in range(STEPS):
        dist.all_reduce(grads)
    dist.barrier()

    def dump_when_told() -> None:
        while not (out / "dump-now").exists():
            time.sleep(0.05)
        c10d = torch._C._distributed_c10d
        (out / "dumps" / f"nccl_trace_rank_{rank}").write_bytes(c10d._dump_fr_trace())
        (out / "json" / f"fr_rank_{rank}.json").write_bytes(c10d._dump_fr_trace_json())
        with open(out / "faulthandler" / f"stack_rank_{rank}.txt", "w") as handle:
            faulthandler.dump_traceback(handle, all_threads=True)
        (out / f"done-{rank}").touch()
        while len(list(out.glob("done-*"))) < WORLD:
            time.sleep(0.05)
        os._exit(0)

    threading.Thread(target=dump_when_told, daemon=True).start()
    (out / f"ready-{rank}").touch()
    if rank == CULPRIT:
        load_batch()  # the culprit is busy elsewhere and never calls the all_reduce
    else:
        dist.all_reduce(grads)


def load_batch() -> None:
    time.sleep(600)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--py-spy", default=shutil.which("py-spy"))
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.out, args.port)
        return 0
    for sub in ("dumps", "json", "faulthandler", "pyspy"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, str(args.out), "--rank", str(r), "--port", str(port)]
        )
        for r in range(WORLD)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(args.out.glob("ready-*"))) < WORLD:
            if time.monotonic() > deadline or any(p.poll() is not None for p in ranks):
                raise SystemExit("the ranks did not reach the hang")
            time.sleep(0.05)
        time.sleep(1.0)  # let the waiting ranks block inside all_reduce
        if args.py_spy:
            for rank, process in enumerate(ranks):
                dumped = subprocess.run(
                    [args.py_spy, "dump", "--pid", str(process.pid)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                (args.out / "pyspy" / f"pyspy_rank_{rank}.txt").write_text(dumped.stdout)
        (args.out / "dump-now").touch()
        for process in ranks:
            process.wait(timeout=60)
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
        for marker in [*args.out.glob("ready-*"), *args.out.glob("done-*"), args.out / "dump-now"]:
            marker.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
