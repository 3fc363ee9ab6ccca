"""A small repository for the site tests: three entries, a real notebook with a figure, a rule.

Used by tests/test_site.py (with a hand-made manifest, fast) and by the browser test (with the
real `trainwreck build`, which executes the notebook).
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# The word the search test types: it occurs only in the straggler entry's fix.
FIX_WORD = "unclog"

STRAGGLER = """\
# yaml-language-server: $schema=../schemas/entry.schema.json
id: demo-straggler
title: Demo straggler stalls every rank
category: performance
severity: high
tags: [straggler, demo]
facets:
  symptom: [slowdown]
  component: [python-runtime]
  framework: [any]
  scale: [single-node, multi-node]
quick_answer: One rank pauses and the others wait; freeze the heap after start-up.
status: draft
summary: >-
  One rank pauses and every other rank waits for it at the next all-reduce. Freeze the heap after
  start-up so the pause never happens.
mechanism: |-
  1. One rank walks a large heap.
  2. The other ranks wait inside the collective.
root_causes:
  - A long pause on one rank.
symptoms:
  - observed: Step time spikes on every rank at once (a pipe | inside the cell).
    why: The ranks wait for the slow one in all_reduce.
  - observed: The spikes recur every few hundred steps.
    why: The pause recurs on a schedule.
affected_systems:
  - Any synchronous data-parallel job.
confirm:
  - check: Compare per-rank step times.
    code: grep 'time_ms' rank*.log
    language: bash
    expect: Spikes on the same step on every rank.
fix:
  primary:
    title: Freeze the heap to unclog the ranks
    when: Default.
    steps:
      - do: Build everything, then collect and freeze.
        code: |-
          import gc
          gc.collect()
          gc.freeze()
        language: python
      - Keep the heap from growing.
    cost: None measurable.
  fallback:
    title: Collect on a schedule
    steps:
      - Disable automatic collection and collect every N steps on every rank.
  verify:
    - The spikes disappear from step time.
prevention:
  - Watch per-rank step time.
fingerprint:
  signal: Recurring spikes aligned across ranks.
  thresholds:
    - metric: spike / median step time
      value: '>= 1.5'
      note: Chosen for the demo.
  rules: [demo-straggler-steps]
code_examples:
  - framework: pytorch
    title: Freeze after start-up
    code: |-
      import gc
      gc.collect(); gc.freeze()
    why: Frozen objects are never scanned again.
  - framework: megatron-lm
    language: bash
    code: pretrain_gpt.py --manual-gc --manual-gc-interval 100
    why: Every rank collects on the same step.
scale:
  single_gpu: Invisible.
  multi_gpu: Visible on every rank.
  large_scale: Costly.
faq:
  - q: Does it change the loss?
    a: No.
references:
  - title: Python gc module
    url: https://docs.python.org/3/library/gc.html
    kind: docs
related:
  - id: demo-fragmentation
    relation: confused-with
    note: Fragmentation slows one rank; this stalls all of them.
  - id: demo-hardware
    relation: see-also
reproduction:
  notebook: notebooks/demo-straggler.ipynb
  device: cpu
  note: Simulates a straggler and plots its step times.
created: '2026-11-30'
updated: '2026-11-30'
"""

FRAGMENTATION = """\
# yaml-language-server: $schema=../schemas/entry.schema.json
id: demo-fragmentation
title: Demo fragmentation needs a GPU
category: reliability
severity: critical
tags: [memory, demo]
facets:
  symptom: [out-of-memory]
  component: [allocator]
  framework: [any, deepspeed]
  scale: [single-gpu]
quick_answer: "The allocator fragments: set expandable segments."
status: draft
summary: The allocator fragments; set expandable segments.
mechanism: Blocks split and never merge.
root_causes: [Variable shapes.]
symptoms:
  - observed: An OOM with much memory reserved but unallocated.
    why: Free blocks are too small.
affected_systems: [CUDA]
confirm:
  - check: Read the OOM message.
    expect: Reserved minus allocated is large.
fix:
  primary:
    title: Expandable segments
    steps: [Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.]
  verify: [No more OOM.]
prevention: [Pad shapes.]
fingerprint:
  signal: Reserved but unallocated memory above 20% of the request.
  thresholds:
    - metric: reserved - allocated
      value: '> 20% of the request'
code_examples:
  - framework: shell
    language: bash
    code: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    why: Segments grow instead of splitting.
scale:
  single_gpu: Happens.
  multi_gpu: Happens per rank.
faq: []
references:
  - title: CUDA semantics
    url: https://pytorch.org/docs/stable/notes/cuda.html
    kind: docs
related:
  - id: demo-straggler
    relation: confused-with
reproduction:
  notebook: notebooks/demo-fragmentation.ipynb
  device: gpu
created: '2026-11-30'
updated: '2026-11-30'
"""

HARDWARE = """\
# yaml-language-server: $schema=../schemas/entry.schema.json
id: demo-hardware
title: Demo hardware fault
category: infrastructure
severity: low
tags: [hardware]
facets:
  symptom: [crash]
  component: [hardware]
  framework: [any]
  scale: [multi-node]
quick_answer: A cable fails; replace it.
status: draft
summary: A cable fails.
mechanism: Bits flip on the wire.
root_causes: [A bad cable.]
symptoms:
  - observed: Link errors.
    why: The cable is bad.
affected_systems: [Clusters]
confirm:
  - check: Read the link counters.
    expect: Errors rise.
fix:
  primary:
    title: Replace the cable
    steps: [Replace it.]
  verify: [Counters stay flat.]
prevention: [Burn-in tests.]
fingerprint:
  signal: Link error counters rise.
  thresholds:
    - metric: link errors per hour
      value: '> 0'
code_examples:
  - framework: shell
    language: bash
    code: ibstat
    why: Shows the link state.
scale:
  single_gpu: Not applicable.
  multi_gpu: Rare.
faq: []
references:
  - title: Example reference
    url: https://docs.python.org/3/
    kind: docs
related: []
reproduction:
  not_reproducible: Software cannot break a cable.
created: '2026-11-30'
updated: '2026-11-30'
"""

RULE = """\
# yaml-language-server: $schema=../schemas/rule.schema.json
id: demo-straggler-steps
entry: demo-straggler
title: Step time spikes on every rank
description: Recurring step-time spikes on all ranks at once mean one rank stalls the others.
confidence: 0.6
matchers:
  step:
    regex: 'step (?P<step>\\d+) time_ms (?P<ms>[\\d.]+)'
    values: {ms: ms}
series:
  step_ms: {matcher: step, value: ms, index: step}
detectors:
  stalls:
    threshold: {series: step_ms, above: 400, min_count: 2}
condition: 'stalls'
report:
  evidence: [step]
  max_evidence: 4
  initiating_rank: first
tests:
  match: [tests/logs/demo-straggler/broken.log]
  clean: [tests/logs/demo-straggler/healthy.log]
"""


def _step_log(spikes: bool) -> str:
    lines = []
    for step in range(1, 41):
        ms = 650.0 if spikes and step % 10 == 0 else 100.0 + step % 3
        lines.append(f"[rank0]: step {step} time_ms {ms:.1f}")
    return "\n".join(lines) + "\n"


NOTEBOOK_CELLS: list[tuple[str, str, list[str]]] = [
    ("markdown", "# Demo straggler\n\nThis notebook **simulates** step times and plots them.", []),
    ("code", 'scale = "ci"\nevidence_dir = "build/evidence/demo-straggler"', ["parameters"]),
    (
        "code",
        "import json\n"
        "from pathlib import Path\n"
        "import matplotlib\n"
        "import matplotlib.pyplot as plt\n"
        "evidence = Path(evidence_dir)\n"
        "broken = [650.0 if s % 10 == 0 else 100.0 + s % 3 for s in range(1, 41)]\n"
        "fixed = [100.0 + s % 3 for s in range(1, 41)]\n"
        "for name, times in (('broken', broken), ('fixed', fixed)):\n"
        "    (evidence / name).mkdir(parents=True, exist_ok=True)\n"
        "    lines = [f'[rank0]: step {s} time_ms {t:.1f}' for s, t in enumerate(times, 1)]\n"
        "    (evidence / name / 'rank0.log').write_text('\\n'.join(lines) + '\\n')\n"
        "spikes = sum(t > 400 for t in broken)\n"
        "assert spikes == 4, spikes\n"
        "assert max(fixed) < 400\n"
        "(evidence / 'metrics.json').write_text(json.dumps({'spikes_broken': spikes, 'spikes_fixed': 0}))\n"
        "print(f'spikes before the fix: {spikes}, after: 0')",
        [],
    ),
    ("markdown", "## Before and after\n\nThe spikes vanish once the heap is frozen.", []),
    (
        "code",
        "fig, ax = plt.subplots(figsize=(6, 3))\n"
        "ax.plot(broken, label='broken')\n"
        "ax.plot(fixed, label='fixed')\n"
        "ax.set_xlabel('step'); ax.set_ylabel('ms'); ax.legend()\n"
        "fig.savefig(evidence / 'step_time.png')\n"
        "plt.show()",
        [],
    ),
]


def notebook() -> dict[str, Any]:
    cells = []
    for index, (kind, source, tags) in enumerate(NOTEBOOK_CELLS):
        cell: dict[str, Any] = {
            "cell_type": kind,
            "id": f"cell-{index}",
            "metadata": {"tags": tags} if tags else {},
            "source": source,
        }
        if kind == "code":
            cell["execution_count"] = None
            cell["outputs"] = []
        cells.append(cell)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def gpu_notebook() -> dict[str, Any]:
    data = notebook()
    data["cells"] = [
        *data["cells"][:2],
        {
            "cell_type": "code",
            "id": "gpu-0",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import torch\nassert torch.cuda.is_available()",
        },
    ]
    data["cells"][1]["source"] = 'scale = "ci"\nevidence_dir = "build/evidence/demo-fragmentation"'
    return data


def png_bytes(width: int = 8, height: int = 4) -> bytes:
    """A tiny valid PNG (solid orange), without needing matplotlib."""
    raw = b"".join(b"\x00" + b"\xff\x80\x00" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def make_repo(root: Path, *, with_rule: bool = True) -> Path:
    """The fixture repository at `root`, with the real schemas, mkdocs.yml and docs/."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "schemas", root / "schemas")
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    (root / "entries").mkdir()
    (root / "entries/demo-straggler.yaml").write_text(STRAGGLER)
    (root / "entries/demo-fragmentation.yaml").write_text(FRAGMENTATION)
    (root / "entries/demo-hardware.yaml").write_text(HARDWARE)
    (root / "notebooks").mkdir()
    (root / "notebooks/demo-straggler.ipynb").write_text(json.dumps(notebook(), indent=1))
    (root / "notebooks/demo-fragmentation.ipynb").write_text(json.dumps(gpu_notebook(), indent=1))
    if with_rule:
        (root / "rules").mkdir()
        (root / "rules/demo-straggler-steps.yaml").write_text(RULE)
        logs = root / "tests/logs/demo-straggler"
        logs.mkdir(parents=True)
        (logs / "broken.log").write_text(_step_log(spikes=True))
        (logs / "healthy.log").write_text(_step_log(spikes=False))
    else:
        text = (root / "entries/demo-straggler.yaml").read_text()
        (root / "entries/demo-straggler.yaml").write_text(
            text.replace("  rules: [demo-straggler-steps]\n", "")
        )
    return root


def fake_run(root: Path, *, status: str = "passed", stale: bool = False) -> dict[str, Any]:
    """build/manifest.json and an executed notebook with a figure, as reproduce writes them,
    without running anything (for fast tests). `stale`: hash of an older notebook source."""
    from trainwreck import reproduce
    from trainwreck.model import load_entry

    entry = load_entry(root / "entries/demo-straggler.yaml", root)
    source = notebook()
    digest = reproduce.source_hash(source, entry.reproduction, "ci")
    if stale:
        digest = "0" * 64
    executed = notebook()
    executed["cells"][2]["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "spikes before the fix: 4, after: 0\n"}
    ]
    executed["cells"][4]["outputs"] = [
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {
                "image/png": base64.b64encode(png_bytes()).decode(),
                "text/plain": "<Figure size 600x300 with 1 Axes>",
            },
        }
    ]
    evidence = root / "build/evidence/demo-straggler"
    for side, spikes in (("broken", True), ("fixed", False)):
        (evidence / side).mkdir(parents=True, exist_ok=True)
        (evidence / side / "rank0.log").write_text(_step_log(spikes))
    (evidence / "metrics.json").write_text(json.dumps({"spikes_broken": 4, "spikes_fixed": 0}))
    (root / "build/executed").mkdir(parents=True, exist_ok=True)
    (root / "build/executed/demo-straggler.ipynb").write_text(json.dumps(executed))
    record = {
        "id": "demo-straggler",
        "notebook": "notebooks/demo-straggler.ipynb",
        "device": "cpu",
        "status": status,
        "cached": False,
        "source_hash": digest,
        "executed": "build/executed/demo-straggler.ipynb",
        "host": {"cpu": "Demo CPU 9000", "gpu": None, "driver": None},
        "versions": {"python": "3.11.2", "torch": "2.13.0+cpu", "cuda": None},
        "started": "2026-11-30T01:02:03+00:00",
        "duration_s": 1.5,
        "evidence": {
            "dir": "build/evidence/demo-straggler",
            "logs": {
                "broken": ["build/evidence/demo-straggler/broken/rank0.log"],
                "fixed": ["build/evidence/demo-straggler/fixed/rank0.log"],
            },
            "metrics": "build/evidence/demo-straggler/metrics.json",
            "figures": [],
        },
        "error": None
        if status != "failed"
        else {"cell": 2, "source": "assert spikes == 4", "message": "AssertionError: 3"},
    }
    gpu_record = dict(record, id="demo-fragmentation", device="gpu", status="skipped-needs-gpu")
    gpu_record.update(executed=None, notebook="notebooks/demo-fragmentation.ipynb")
    manifest = {
        "version": 1,
        "generated": "2026-11-30T01:02:05+00:00",
        "toolkit_version": "0.1.0",
        "notebooks": [record, gpu_record],
    }
    (root / "build/manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest
