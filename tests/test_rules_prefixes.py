"""The paste-shape layer (engine/prefixes.py): every text rule recognises its message in every
shape a real paste takes. Each shape is checked end to end through `diagnose` with the real rules,
plus the layer's own invariants (line count kept, byte offsets of evidence still right)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from trainwreck.compile.packs import resolve
from trainwreck.diagnose import diagnose
from trainwreck.engine import prefixes

ROOT = Path(__file__).resolve().parents[1]

# PyTorch's DataLoader message for a worker killed by SIGBUS (torch/csrc/DataLoader.cpp).
BUS = (
    "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible "
    "that dataloader's workers are out of shared memory. Please try to raise your shared memory "
    "limit."
)
SHM = "dataloader-shm-exhausted"


@pytest.fixture(scope="module")
def rule_set():
    return resolve(ROOT, use_installed=False)


def entries(tmp_path: Path, text: str, rule_set, name: str = "paste.log") -> list[dict]:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return diagnose([str(path)], ROOT, rule_set=rule_set).findings


def wrap(text: str, width: int) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


SHAPES = {
    "torchrun rank": ("[rank3]: " + BUS, 3),
    "torchrun default": ("[default1]:" + BUS, 1),
    "torchrun host and rank": ("node-7: [rank5]: " + BUS, 5),
    "open mpi tag": ("Fri Aug 11 12:31:45 2023[1,6]<stderr>:" + BUS, 6),
    "srun label": ("2: " + BUS, 2),
    "nccl host pid tid": ("gpu004:2200689:2200706 [3] " + BUS, None),
    "ray pid": ("(pid=31337) " + BUS, None),
    "ray actor": ("(RayTrainWorker pid=912, ip=10.0.0.4) " + BUS, None),
    "iso timestamp and level": ("2024-05-01 12:00:03,512 ERROR " + BUS, None),
    "bracketed iso timestamp": ("[2024-05-01T12:00:03.512Z] " + BUS, None),
    "syslog": ("May  1 12:00:03 gpu-node-3 python[4242]: " + BUS, None),
    "dmesg": ("[ 1843.308145] " + BUS, None),
    "ansi colour": (
        "\x1b[31m\x1b[1m" + BUS.replace("Bus error", "Bus \x1b[0merror") + "\x1b[0m",
        None,
    ),
    "crlf": ("epoch 1\r\n" + BUS + "\r\n", None),
    "progress bar redraw": ("  3%|█  | 3/100\r" + BUS, None),
    "wrapped at 80": ("Traceback (most recent call last):\n" + wrap(BUS, 80), None),
    "wrapped at 120": (wrap(BUS, 120), None),
    "right padded": ("\n".join(line.ljust(200) for line in ("epoch 1", BUS, "done")), None),
    "markdown quote": ("> " + BUS, None),
    "indented": ("    " + BUS, None),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_reaches_the_rule(tmp_path, rule_set, shape):
    text, rank = SHAPES[shape]
    findings = entries(tmp_path, text, rule_set)
    assert [f.entry for f in findings][:1] == [SHM], shape
    if rank is not None:
        assert list(findings[0].ranks) == [rank]


def test_rich_box_traceback_with_the_message_wrapped_inside(tmp_path, rule_set):
    """rich draws the frame in a box and wraps long text at word boundaries inside it; a box line
    filled up to its border continues on the next one."""
    width = 60
    body = textwrap.wrap(BUS, width)
    frame = "/opt/torch/utils/data/dataloader.py:1024 in _try_get_data"
    lines = ["╭──── Traceback (most recent call last) ────╮", "│ " + frame.ljust(width) + " │"]
    lines += ["│ " + part.ljust(width) + " │" for part in body]
    lines += ["╰" + "─" * (width + 2) + "╯"]
    assert [f.entry for f in entries(tmp_path, "\n".join(lines), rule_set)] == [SHM]


def test_message_split_after_a_word(tmp_path, rule_set):
    text = (
        "DataLoader worker (pid 270071) is killed by signal: \n"
        "Bus error. It is possible that dataloader's workers are out of shared memory. \n"
        "Please try to raise your shared memory limit. \n"
    )
    assert [f.entry for f in entries(tmp_path, text, rule_set)] == [SHM]


def test_interleaved_ranks_keep_their_own_lines(tmp_path, rule_set):
    """Two ranks' tracebacks interleaved line by line: each rank's block is matched on its own
    lines, and the finding names the rank that printed the message."""
    rank0 = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>']
    rank1 = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', BUS]
    lines = []
    for index in range(3):
        if index < len(rank0):
            lines.append(f"[rank0]: {rank0[index]}")
        lines.append(f"[rank1]: {rank1[index]}")
    findings = entries(tmp_path, "\n".join(lines), rule_set)
    assert findings[0].entry == SHM and list(findings[0].ranks) == [1]


def test_anchored_patterns_match_behind_prefixes(tmp_path, rule_set):
    """A rule anchored at the message start ('^EOFError') still matches behind stacked prefixes."""
    frame = '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 1040, in load'
    text = "\n".join(
        [
            "[rank2]: Traceback (most recent call last):",
            f"[rank2]: {frame}",
            "[rank2]: EOFError: Ran out of input",
        ]
    )
    findings = entries(tmp_path, text, rule_set)
    assert [f.entry for f in findings] == ["checkpoint-truncated"]
    assert list(findings[0].ranks) == [2]


def test_normalize_keeps_line_count_and_evidence_lines(tmp_path, rule_set):
    text = "\x1b[2Kstep 1 loss 2.0\r\n" + wrap(BUS, 80) + "\nstep 2 loss 1.9\n"
    shaped = prefixes.normalize_block(text.encode())
    assert shaped.count(b"\n") == text.encode().count(b"\n")
    findings = entries(tmp_path, text, rule_set)
    evidence = findings[0].evidence[0]
    assert evidence.line == 2  # the first line of the wrapped message


def test_unchanged_block_is_returned_as_is():
    block = b"plain line\nanother plain line\n"
    assert prefixes.normalize_block(block) is block


def test_ordinary_lines_are_not_joined():
    block = b"x" * 79 + b"\nTraceback (most recent call last):\n" + b"short line \n  indented\n"
    assert prefixes.normalize_block(block).split(b"\n")[:2] == [
        b"x" * 79,
        b"Traceback (most recent call last):",
    ]


def test_logger_records_ending_in_a_space_are_not_joined():
    """DLLogger ends every line with a space (the empty unit after the value), and vLLM lines can
    too: a line that starts with a logger's upper-case tag and a date is a record of its own, not
    the continuation of a message split after a word."""
    dll = [b"DLL 2020-06-04 01:04:%02d.355678 - PARAMETER loss_scale : 0.5 " % s for s in range(3)]
    vllm = [b"INFO 05-10 12:34:5%d [engine.py:310] Added request " % s for s in range(2)]
    for lines in (dll, vllm):
        block = b"\n".join(lines) + b"\n"
        assert prefixes.normalize_block(block).split(b"\n")[: len(lines)] == lines


def test_a_message_split_after_a_word_is_still_joined():
    block = b"RuntimeError: CUDA error: an illegal memory access \nwas encountered\n"
    assert prefixes.normalize_block(block).split(b"\n")[0] == (
        b"RuntimeError: CUDA error: an illegal memory access was encountered"
    )


@pytest.mark.parametrize(
    ("line", "rank", "body"),
    [
        (
            b"[rank12]:[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] x",
            12,
            b"[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] x",
        ),
        (b"rdma-train-worker-0: torch.x", "rdma-train-worker-0", b"torch.x"),
        (b"train_loss: 0.5", None, b"train_loss: 0.5"),
        (b"16:35:16 INFO     iteration=865 loss=nan", None, b"iteration=865 loss=nan"),
        (b"Feb 14 05:03:41 gpu-1 kernel: NVRM: Xid", None, b"NVRM: Xid"),
        (b"[80746] [rank0]: message", 0, b"message"),
        # system logs in other shapes
        (b"[  +0.000316] pcieport 0000:00:03.0: AER: x", None, b"pcieport 0000:00:03.0: AER: x"),
        (b"[Jan27 23:04] NVRM: Xid (PCI:0000:3d:00): 43", None, b"NVRM: Xid (PCI:0000:3d:00): 43"),
        (b"[   36.112749][  T125] refgen: disabling", None, b"refgen: disabling"),
        (b"kernel: NVRM: Xid (PCI:0000:dc:00): 45, x", None, b"NVRM: Xid (PCI:0000:dc:00): 45, x"),
        (b"2024-01-27T23:04:35+0000 gpu01 kernel: NVRM: Xid", None, b"NVRM: Xid"),
        (b"kern  :err   : [Fri Jul 11 09:48:29 2014] NVRM: x", None, b"NVRM: x"),
        # loggers' prefixes
        (
            b"(Worker_TP0 pid=4062) ERROR 09-05 01:18:30 [multiproc_executor.py:1000] Traceback",
            None,
            b"Traceback",
        ),
        (b"INFO 01-11 13:09:40 multiproc_worker_utils.py:127] Killing", None, b"Killing"),
        (
            b"W0920 09:10:41.194000 84933 site-packages/torch/distributed/run.py:719] Received",
            None,
            b"Received",
        ),
        (b"WARNING:torch.distributed.elastic.multiprocessing.api:Sending", None, b"Sending"),
        (b"trainer/0 [1]:[W socket.cpp:558] x", 1, b"[W socket.cpp:558] x"),
        (b"10.96.202.43: {'loss': 1.8673}", None, b"{'loss': 1.8673}"),
        (
            b"DLL 2020-06-04 01:04:20.355678 - PARAMETER loss_scale : 0.5 ",
            None,
            b"PARAMETER loss_scale : 0.5",
        ),
    ],
)
def test_split_prefix(line, rank, body):
    assert prefixes.split_prefix(line) == (rank, body)
