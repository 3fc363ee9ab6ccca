"""`trainwreck new ID`: the skeleton of a new failure for a contributor to fill in.

Writes entries/<id>.yaml (every section present, each one a placeholder the schema accepts on
a line that says TODO, which `trainwreck check` lists as a warning until it is filled),
rules/<id>.yaml (a rule skeleton that `trainwreck compile` leaves out of the bundle, with one
warning, while a TODO line is left) and notebooks/<id>.ipynb (the parameters cell and a markdown outline of the
steps every reproduction takes). Existing files are never overwritten.

`trainwreck new --pack NAME` writes NAME/, a repository for a team's private rules: a
pyproject.toml whose [tool.trainwreck.pack] names the wheel `trainwreck compile` builds, empty
rules/, entries/ and tests/logs/, a CI workflow and a README with the loop.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
from pathlib import Path

from trainwreck.compile.wheel import name_taken
from trainwreck.errors import CommandProblem, CommandUsageError, TrainwreckError

ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

# Every placeholder is a value the schema accepts, on a line that says TODO: the skeleton checks
# and compiles as written, `trainwreck check` lists each TODO line as a warning until it is
# filled, and compile leaves a rule with a TODO line out of the bundle (one warning) so that
# diagnose and build are not held up by a half-finished rule.
ENTRY_TEMPLATE = """\
# yaml-language-server: $schema=../schemas/entry.schema.json
# Fill in every line that says TODO; `trainwreck check` lists those left, one warning each.
# Every field is described in schemas/entry.schema.json (your editor shows it).
id: {id}
title: 'TODO: the failure as a reader would search for it'
category: reliability  # TODO: reliability | performance | correctness | infrastructure
severity: medium  # TODO: low | medium | high | critical
tags: [todo]  # TODO: kebab-case tags, e.g. [distributed, memory]
facets:  # the controlled vocabulary: every value is listed under $defs in the schema
  symptom: [crash]  # TODO: hang | crash | slowdown | out-of-memory | nan-or-divergence | wrong-results | fails-to-start
  component: [python-runtime]  # TODO: nccl | allocator | dataloader | checkpoint | compiler | kernel | launcher | storage | hardware | python-runtime | autograd | numerics
  framework: [any]  # TODO: any (plain PyTorch hits it too) and/or ddp | fsdp | deepspeed | megatron-lm | hf-trainer | accelerate | lightning | torchtitan
  scale: [single-gpu]  # TODO: single-gpu | single-node | multi-node (every scale where it appears)
quick_answer: 'TODO: one line ending in a full stop, what it is and the first thing to do.'
status: draft
summary: 'TODO: the quick answer in 2-4 sentences, what it is, the root cause, the primary fix'
mechanism: 'TODO: how it happens, step by step, at the level of the runtime'
root_causes: ['TODO: one sentence per underlying cause']
symptoms:
  - observed: 'TODO: what you see, a log line, a metric shape, a behaviour'
    why: 'TODO: why the mechanism produces it'
affected_systems: ['TODO: frameworks, versions, hardware, workloads']
confirm:
  - check: 'TODO: what to run or look at'
    code: 'echo TODO'  # TODO: the command, snippet or log pattern (or delete this line)
    language: bash
    expect: 'TODO: the result that confirms or rules out this failure'
fix:
  primary:
    title: 'TODO: short name of the fix'
    when: 'TODO: when to choose it'  # (or delete this line)
    steps:
      - do: 'TODO: the action'
        code: '# TODO: the exact code or command (or delete this line)'
        language: python
    cost: 'TODO: what the fix costs'  # (or delete this line)
  # fallback: and emergency: take the same shape as primary (optional).
  verify:
    - do: 'TODO: the signal that must disappear or the metric that must change'
prevention: ['TODO: practices and guards that stop it from happening again']
fingerprint:
  signal: 'TODO: the measurable signal, in one or two sentences'
  thresholds:
    - metric: 'TODO: what is measured'
      value: 'TODO: the value that indicates the failure, e.g. > 20% of the failed request'
      note: 'TODO: why this threshold'  # (or delete this line)
  rules: [{id}]  # the rules in rules/ that detect it
code_examples:
  - framework: pytorch  # pytorch | huggingface | lightning | deepspeed | megatron-lm | torchtitan | shell | other
    title: 'TODO: what the example does'
    language: python
    code: '# TODO: complete enough to paste'
    why: 'TODO: why it works'
scale:
  single_gpu: 'TODO: on one GPU or one process'
  multi_gpu: 'TODO: on one node with several GPUs'
  large_scale: 'TODO: on hundreds or thousands of GPUs'  # (or delete this line)
faq:
  - q: 'TODO: a question readers ask'
    a: 'TODO: the answer'
references:
  - title: 'TODO: title of a source you opened'
    url: https://example.com/TODO  # TODO: its http(s) URL
    kind: docs  # docs | source | issue | paper | blog | talk | other
related: []  # other entries: [{{id: other-entry, relation: confused-with, note: how to tell them apart}}]
reproduction:
  notebook: notebooks/{id}.ipynb
  device: cpu  # gpu if the failure needs a CUDA GPU
  # note: what the notebook does, in one sentence (optional)
  # If software cannot cause this failure (a hardware fault), replace the whole block with
  #   reproduction: {{not_reproducible: the reason}}
created: '{today}'
updated: '{today}'
"""

RULE_TEMPLATE = """\
# yaml-language-server: $schema=../schemas/rule.schema.json
# Fill in every line that says TODO. Reference: docs/rule-language.md. Until no TODO is left,
# `trainwreck compile` warns once and leaves this rule out of the bundle; then it validates the
# rule and runs its regression logs.
id: {id}
entry: {id}
title: 'TODO: what the rule sees, in a few words'
description: 'TODO: why these signals mean this failure (shown on the site)'
confidence: 0.5  # 0..1 when the condition holds
matchers:
  signal:
    regex: 'TODO'  # TODO: an RE2 pattern with named captures, e.g. 'step (?P<step>\\d+) time_ms (?P<ms>[\\d.]+)'
condition: signal  # a boolean over matcher and detector names
report:
  evidence: [signal]
  max_evidence: 8
  initiating_rank: first
tests:
  match: []  # TODO: logs that must produce a finding, e.g. tests/logs/{id}/broken-4ranks
  clean: []  # TODO: logs that must not: healthy runs, look-alikes, unrelated errors
"""

NOTEBOOK_OUTLINE = [
    (
        "markdown",
        "# {title}\n\n"
        "TODO: one paragraph: what this notebook reproduces and what it proves. It causes the "
        "failure for real, measures the fingerprint and asserts it with numbers, applies the fix, "
        "asserts the fingerprint is gone and reports what the fix cost.",
    ),
    (
        "parameters",
        'scale = "ci"  # "ci": about a minute on 2 CPU cores and still asserting; "full": closer to production\n'
        'evidence_dir = "build/evidence/{id}"',
    ),
    (
        "code",
        "from pathlib import Path\n\n"
        "evidence = Path(evidence_dir)\n"
        'for sub in ("broken", "fixed"):\n'
        "    (evidence / sub).mkdir(parents=True, exist_ok=True)",
    ),
    (
        "markdown",
        "## The broken run\n\n"
        "TODO: explain the setup that causes the failure. Write the run's training log into "
        "`{{evidence_dir}}/broken/` the way real training prints it (one file per rank for "
        "multi-process runs).",
    ),
    ("code", 'raise NotImplementedError("TODO: run the broken configuration")'),
    (
        "markdown",
        "## The fingerprint\n\nTODO: measure the signal and `assert` it with numbers.",
    ),
    ("code", 'raise NotImplementedError("TODO: measure and assert the fingerprint")'),
    (
        "markdown",
        "## The fix\n\n"
        "TODO: apply the fix, write the fixed run's log into `{{evidence_dir}}/fixed/`, assert the "
        "fingerprint is gone and report what the fix cost. Save the numbers to "
        "`{{evidence_dir}}/metrics.json`.",
    ),
    ("code", 'raise NotImplementedError("TODO: apply the fix and assert the fingerprint is gone")'),
    (
        "markdown",
        "## Before and after\n\n"
        "TODO: plot the signal before and after with matplotlib; show it inline and save it as "
        "PNG into `evidence_dir`.",
    ),
    ("code", 'raise NotImplementedError("TODO: plot before and after")'),
]


def notebook_json(entry_id: str) -> dict:
    """A nbformat 4 notebook: the outline above with its parameters cell tagged."""
    cells = []
    for kind, text in NOTEBOOK_OUTLINE:
        source = text.replace("{id}", entry_id).replace("{title}", entry_id.replace("-", " "))
        source = source.replace("{{", "{").replace("}}", "}")
        if kind == "markdown":
            cells.append({"cell_type": "markdown", "metadata": {}, "source": source})
        else:
            cells.append(
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "metadata": {"tags": ["parameters"]} if kind == "parameters" else {},
                    "outputs": [],
                    "source": source,
                }
            )
    for index, cell in enumerate(cells):
        cell["id"] = f"{entry_id[:20]}-{index}"
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "trainwreck": {"device": "cpu"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def scaffold(root: Path, entry_id: str, today: str | None = None) -> list[Path]:
    """Write the three skeletons; raises FileExistsError (naming the file) before writing any."""
    if not ID_RE.match(entry_id):
        raise ValueError(
            f"'{entry_id}' is not a kebab-case id (lowercase letters, digits and single hyphens)"
        )
    today = today or _dt.date.today().isoformat()
    files = {
        root / "entries" / f"{entry_id}.yaml": ENTRY_TEMPLATE.format(id=entry_id, today=today),
        root / "rules" / f"{entry_id}.yaml": RULE_TEMPLATE.format(id=entry_id),
        root / "notebooks" / f"{entry_id}.ipynb": json.dumps(notebook_json(entry_id), indent=1)
        + "\n",
    }
    existing = [path for path in files if path.exists()]
    if existing:
        raise FileExistsError(", ".join(str(p) for p in existing))
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as handle:  # "x": never clobber a racing writer
            handle.write(text)
    return list(files)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", nargs="?", help="kebab-case id of the new failure")
    parser.add_argument(
        "--pack",
        metavar="NAME",
        help="instead: scaffold a private rule-pack repository NAME/ under --root",
    )


def _writing_errors(exc: OSError | ValueError) -> TrainwreckError:
    """What a failed scaffold means: a bad name (usage), a file already there (refused, never
    overwritten) or a write that failed."""
    if isinstance(exc, ValueError):
        return CommandUsageError(str(exc))
    if isinstance(exc, FileExistsError):
        return CommandProblem(f"refusing to overwrite existing {exc}")
    return CommandProblem(f"cannot write: {exc}")


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if not root.is_dir():
        raise CommandUsageError(f"{root} is not a folder")
    if args.pack is not None or args.id is None:
        return run_pack(args)
    try:
        written = scaffold(root, args.id)
    except (ValueError, OSError) as exc:
        raise _writing_errors(exc) from None
    for path in written:
        print(f"created {path}")
    print(
        "next: fill in every TODO; `trainwreck check` lists what is missing, "
        f"`trainwreck reproduce {args.id}` runs the notebook, `trainwreck compile` tests the rule",
        file=sys.stderr,
    )
    return 0


# --- private rule packs ----------------------------------------------------------------------

# The actions the pack's workflow uses, pinned like this repository's own workflows
# (tests/test_workflows.py keeps the two in step).
PACK_ACTIONS = {
    "checkout": "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1",
    "setup-python": "actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97 # v7.0.0",
    "upload-artifact": "actions/upload-artifact@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f # v7.0.0",
}

PACK_PYPROJECT = """\
# A private Trainwreck rule pack. `trainwreck compile` reads [tool.trainwreck.pack] for the name
# and version of the wheel it writes to dist/; the wheel registers its rules under the
# `trainwreck.rules` entry point, so `trainwreck diagnose` uses them next to the public pack.
# Build the wheel with `trainwreck compile`, not with pip: this file has no [build-system].
[tool.trainwreck.pack]
name = "{name}"
version = "0.1.0"
"""

PACK_MKDOCS = """\
# `trainwreck diagnose` links each finding of this pack to <site_url>entries/<id>/.
# TODO: set site_url to where your team publishes these entries (an internal wiki or a
# `trainwreck build` of this repository). The .invalid address below is a placeholder, so until
# then diagnose prints no link (or the page in a local build under site/).
site_name: {name}
site_url: https://{name}.invalid/
"""

PACK_GITIGNORE = """\
/build/
/dist/
__pycache__/
"""

PACK_README = """\
# {name}

Private detection rules for Trainwreck's `trainwreck diagnose`: failures your team has seen in its own jobs, with the fix your team
applies. This repository compiles into a wheel, `{module}-<version>-py3-none-any.whl`,
registered under the `trainwreck.rules` entry point; installed next to `trainwreck`, its rules
run beside the public ones.

## Add a failure

```bash
pip install trainwreck                 # or from a checkout of the toolkit: pip install /path/to/trainwreck
trainwreck new my-failure --root .     # entries/my-failure.yaml, rules/my-failure.yaml, notebooks/my-failure.ipynb
```

- `rules/<id>.yaml`: the detector, in the rule language (`docs/rule-language.md` of the
  Trainwreck repository). Its `tests.match` logs must produce a finding, its `tests.clean` logs must not.
- `tests/logs/<id>/`: those logs, in the exact wording your jobs print (scrub hostnames and
  anything private that must not leave your network).
- `entries/<id>.yaml`: what the finding tells the engineer: the root cause, the fix and how to
  verify it. A failure you cannot reproduce in a notebook says so with
  `reproduction: {{not_reproducible: the reason}}`; then delete the notebook.

## Build and use

```bash
trainwreck check                       # every entry: schema, links, references
trainwreck compile                     # every rule, its regression logs, then dist/{module}-0.1.0-py3-none-any.whl
pip install dist/{module}-*.whl        # next to trainwreck and the public rule pack
trainwreck diagnose path/to/logs/      # findings from both packs
```

Bump `version` in `pyproject.toml` for each release of the pack; CI
(`.github/workflows/rules.yml`) runs the same check and compile on every pull request and keeps
the wheel as a build artifact. Publish it to your private package index, or install the wheel
file directly. In a GitHub workflow, the Trainwreck action takes it as `rule-packs:`.
"""

PACK_WORKFLOW = """\
# Check the entries, compile the rules with their regression logs, keep the wheel.
name: rules

on:
  pull_request:
  push:
    branches: [main]
    tags: ["v*"]

permissions:
  contents: read

jobs:
  compile:
    runs-on: ubuntu-24.04
    timeout-minutes: 15
    steps:
      - uses: {checkout}
        with:
          persist-credentials: false

      - uses: {setup_python}
        with:
          python-version: "3.11"

      - name: Install trainwreck
        run: python -m pip install "trainwreck>={version}"

      - name: trainwreck check
        run: trainwreck check

      - name: trainwreck compile (rules and their regression logs)
        run: trainwreck compile --out dist

      - uses: {upload_artifact}
        with:
          name: rule-pack
          path: dist/*.whl
          if-no-files-found: error
"""


def pack_files(name: str) -> dict[str, str]:
    """The files of a new rule-pack repository, by path relative to it."""
    from trainwreck import __version__
    from trainwreck.compile.wheel import normalise

    module = normalise(name)
    return {
        "pyproject.toml": PACK_PYPROJECT.format(name=name),
        "README.md": PACK_README.format(name=name, module=module),
        "mkdocs.yml": PACK_MKDOCS.format(name=name),
        ".gitignore": PACK_GITIGNORE,
        ".github/workflows/rules.yml": PACK_WORKFLOW.format(
            checkout=PACK_ACTIONS["checkout"],
            setup_python=PACK_ACTIONS["setup-python"],
            upload_artifact=PACK_ACTIONS["upload-artifact"],
            version=__version__,
        ),
        "entries/.gitkeep": "",
        "rules/.gitkeep": "",
        "tests/logs/.gitkeep": "",
    }


def scaffold_pack(parent: Path, name: str) -> Path:
    """Write the rule-pack repository parent/NAME; refuses a folder that exists."""
    if not ID_RE.match(name):
        raise ValueError(
            f"'{name}' is not a kebab-case pack name (lowercase letters, digits and single hyphens)"
        )
    if name == "trainwreck-rules":
        raise ValueError(f"'{name}' is the name of the public rule pack; choose your own")
    if (taken := name_taken(name)) is not None:
        raise ValueError(
            f"pack name '{name}' would replace another distribution when installed ({taken}): "
            "choose another name"
        )
    target = parent / name
    if target.exists():
        raise FileExistsError(str(target))
    target.mkdir()
    for relative, text in pack_files(name).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(text)
    return target


def run_pack(args: argparse.Namespace) -> int:
    if args.pack is None:
        raise CommandUsageError("give an ID, or --pack NAME")
    if args.id is not None:
        raise CommandUsageError("give an ID or --pack NAME, not both")
    try:
        target = scaffold_pack(Path(args.root), args.pack)
    except (ValueError, OSError) as exc:
        raise _writing_errors(exc) from None
    print(f"created {target}")
    print(
        f"next: cd {target} && git init && trainwreck new <id> --root . ; "
        "fill the rule, its logs and the entry; `trainwreck compile` writes the wheel to dist/",
        file=sys.stderr,
    )
    return 0
