"""The `trainwreck` command line: a thin dispatcher over the stage modules.

Each subcommand lives in its stage module, which provides `configure_parser(parser)` and
`run(args) -> int`. Modules are imported only when their subcommand runs, so `trainwreck
diagnose` never pays for (or needs) the jupyter or mkdocs stacks.

Errors are reported here, once: a stage raises a `trainwreck.errors.TrainwreckError` and this
module prints its one line and exits with its code (see trainwreck/errors.py for the codes);
anything else is a bug, reported as an internal error without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence

from trainwreck import __version__
from trainwreck.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, TrainwreckError

# Exit status of any command that crashed: never 1, which means "problems / findings found".
EXIT_INTERNAL_ERROR = EXIT_INTERNAL

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("trainwreck.check", "validate entries (schema, ids, links, references)"),
    "reproduce": ("trainwreck.reproduce", "execute reproduction notebooks (cached)"),
    "compile": ("trainwreck.compile.command", "validate rules and build the rule bundle and wheel"),
    "diagnose": ("trainwreck.diagnose", "diagnose training logs offline"),
    "merge": (
        "trainwreck.scaleout.command",
        "report on scan states saved by diagnose --partial, as one scan of all their logs",
    ),
    "explain": ("trainwreck.explain", "show why one rule did or did not fire on a log"),
    "rules": (
        "trainwreck.rule_list",
        "list the rules diagnose runs, with their entries and titles",
    ),
    "build": ("trainwreck.site", "check, reproduce, compile and publish the site"),
    "serve": ("trainwreck.site", "preview the built site"),
    "new": ("trainwreck.scaffold", "scaffold a new entry, rule and notebook"),
    "review": ("trainwreck.review", "summarise what a change does to entries, rules and diagnoses"),
    # integrations (issue 30): alert rule files and the MCP server
    "export": ("trainwreck.export.command", "write the rules as Loki or Prometheus alerting rules"),
    "mcp": (
        "trainwreck.mcp.server",
        "serve diagnose, explain and the entries to coding assistants (MCP, stdio)",
    ),
    # --- memory (issue 25): the allocator what-if replay; kept as its own block ---
    "memory": (
        "trainwreck.memory.command",
        "replay a CUDA memory snapshot under other allocator settings",
    ),
    # --- end memory ---
}


# subcommand -> command lines shown under "examples:" in its --help
EXAMPLES: dict[str, tuple[str, ...]] = {
    "check": ("trainwreck check", "trainwreck check --format json"),
    "reproduce": ("trainwreck reproduce host-oom-sigkill", "trainwreck reproduce -j 2 --force"),
    "compile": ("trainwreck compile", "trainwreck compile --no-tests --no-wheel"),
    "diagnose": (
        "trainwreck diagnose logs/",
        "trainwreck diagnose rank*.log --format markdown",
        "kubectl logs job/train | trainwreck diagnose -",
        "trainwreck diagnose --partial node3.state /logs/node3/   # merged by trainwreck merge",
        "trainwreck diagnose --dask tcp://scheduler:8786 /shared/job-1234/",
    ),
    "merge": (
        "trainwreck merge node*.state",
        "trainwreck merge --format json node0.state node1.state",
    ),
    "explain": (
        "trainwreck explain train.log cuda-oom-capacity-oom",
        "trainwreck explain logs/ host-oom-sigkill   # an entry id: each of its rules",
        "trainwreck explain flight-recorder /tmp/nccl_trace_rank_*   # the hang's alignment table",
    ),
    "rules": ("trainwreck rules", "trainwreck rules --entry host-oom-sigkill"),
    "build": ("trainwreck build", "trainwreck build --no-reproduce   # the site without notebooks"),
    "serve": ("trainwreck serve", "trainwreck serve --port 0"),
    "new": ("trainwreck new my-failure-id", "trainwreck new --pack acme-rules"),
    "review": ("trainwreck review", "trainwreck review --base origin/main --out review.md"),
    "export": (
        "trainwreck export loki --out alerts/",
        "trainwreck export prometheus --out alerts/ --loss-metric train_loss",
    ),
    "mcp": ("trainwreck mcp --root ~/trainwreck   # registered as a stdio server",),
    "memory": (
        "trainwreck memory replay oom_snapshot.pickle",
        "trainwreck memory replay snap.pickle --try expandable_segments:True --format json",
    ),
}


def _add_examples(parser: argparse.ArgumentParser, command: str) -> None:
    """Put the command's examples under its own epilog (set by its module, if any)."""
    lines = "\n".join(f"  {line}" for line in EXAMPLES.get(command, ()))
    # (the raw formatter keeps the examples' lines, so the module's own epilog is wrapped here)
    own = textwrap.fill(parser.epilog, width=78) + "\n\n" if parser.epilog else ""
    parser.epilog = own + "examples:\n" + lines if lines else parser.epilog


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="trainwreck",
        description="An executable encyclopedia of ML training failures.",
    )
    parser.add_argument("--version", action="version", version=f"trainwreck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub_parsers: dict[str, argparse.ArgumentParser] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the examples' lines
        )
        sub_parser.set_defaults(_module=module_name)
        sub_parser.add_argument(
            "--root", default=".", help="repository root (default: the current directory)"
        )
        sub_parsers[name] = sub_parser
    return parser, sub_parsers


# Commands that read logs through the engine. numpy's OpenBLAS starts a thread per CPU when it
# loads, which they never use (they run no threaded linear algebra): on two CPUs that cost about
# 60 ms CPU at every start, and more on larger machines.
ONE_BLAS_THREAD = frozenset({"diagnose", "merge", "explain"})
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def load_numpy_with_one_blas_thread() -> None:
    """Import numpy with OpenBLAS held to one thread, unless numpy is loaded already or the user
    chose a thread count. The variable is removed again once OpenBLAS has read it, so processes
    started later (a pager, a notebook) get their usual default."""
    if "numpy" in sys.modules or any(name in os.environ for name in BLAS_THREAD_VARIABLES):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, sub_parsers = build_parser()
    # Parse the command name first, then let its module add its own arguments.
    # Without -h/--help here, so `trainwreck build --help` lists the module's own options.
    known, _ = parser.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    if not known.command and any(a in ("-h", "--help") for a in argv):
        parser.parse_args(argv)  # prints the top-level help and exits 0
    if not known.command:
        parser.print_help()
        return EXIT_USAGE
    if known.command in ONE_BLAS_THREAD:
        load_numpy_with_one_blas_thread()
    module = importlib.import_module(known._module)
    # A module serving several commands (site: build and serve) names them configure_<cmd>_parser.
    configure = (
        getattr(module, f"configure_{known.command}_parser", None) or module.configure_parser
    )
    configure(sub_parsers[known.command])
    _add_examples(sub_parsers[known.command], known.command)
    args = parser.parse_args(argv)
    runner = getattr(module, f"run_{known.command}", None) or module.run
    try:
        return int(runner(args) or EXIT_OK)
    except TrainwreckError as exc:
        print(exc.report(known.command), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("trainwreck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug must not exit 1, which means "problems/findings found"
        if os.environ.get("TRAINWRECK_DEBUG"):
            raise
        print(
            f"trainwreck {known.command}: internal error ({type(exc).__name__}: {exc}); "
            "set TRAINWRECK_DEBUG=1 for the traceback and please report it",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
