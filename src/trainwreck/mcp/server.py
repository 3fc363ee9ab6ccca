"""`trainwreck mcp`: the MCP server (stdio) on the official Python SDK, `mcp` 2.x.

    pip install 'trainwreck[mcp]'
    trainwreck mcp --root /path/to/checkout        # an assistant starts this; it speaks on stdio

Tools: `diagnose` (a pasted log or paths), `explain` (a log and a rule or entry id),
`search_entries` (an error line or words), `get_entry` (an entry's sections as Markdown);
resources `trainwreck://entries/{entry_id}` and `trainwreck://rules/{rule_id}`. Every tool is
read-only and offline (annotations say so); a bad argument, a path that names nothing or a
special file comes back as an MCP error result with one line, never as a crash of the server.
The SDK is imported only here, only when the command runs: the core install never needs it.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from trainwreck import __version__
from trainwreck.errors import TrainwreckError, UsageError
from trainwreck.mcp.tools import Tools

INSTRUCTIONS = (
    "Trainwreck diagnoses ML training logs offline against an encyclopedia of known failures. "
    "Call `diagnose` with a pasted log (`text`) or log files and folders on this machine "
    "(`paths`); `explain` says why one rule did or did not fire; `search_entries` finds the "
    "entries for an error line; `get_entry` gives an entry's quick answer, mechanism, fix and "
    "verification as Markdown. Nothing is written and nothing leaves the machine."
)


def build_server(tools: Tools) -> Any:
    """The MCPServer over `tools` (imports the SDK)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
        from mcp.types import ToolAnnotations
    except ImportError as exc:
        raise UsageError(
            f"trainwreck mcp needs the MCP SDK 2.x: pip install 'trainwreck[mcp]' ({exc})"
        ) from None

    server = MCPServer("trainwreck", instructions=INSTRUCTIONS, version=__version__)
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    # The SDK runs each call in a worker thread; one at a time keeps the lazily read knowledge
    # base and the engine's caches single-threaded (a diagnosis parallelises by itself).
    one_at_a_time = threading.Lock()

    def guarded(call: Any, *args: Any, **kwargs: Any) -> Any:
        """Our errors as the tool's one-line error result; a bug as an internal error."""
        try:
            with one_at_a_time:
                return call(*args, **kwargs)
        except TrainwreckError as exc:
            raise ToolError(exc.report()) from None
        except Exception as exc:  # a bug: one line, and the server keeps serving
            raise ToolError(
                f"trainwreck: internal error ({type(exc).__name__}: {exc}); please report it"
            ) from None

    @server.tool(
        name="diagnose",
        title="Diagnose training logs",
        description=(
            "Which known training failures a log shows: ranked findings with confidence, "
            "ranks, the initiating rank, evidence lines (file:line), the fix and how to verify "
            "it, as `trainwreck diagnose --format json` gives them, plus a short summary. Give "
            "`text` (a pasted log; at most 8 MiB characters, the end is kept) or `paths` (files, "
            "folders, globs, .gz on this machine)."
        ),
        annotations=read_only,
    )
    def diagnose(text: str | None = None, paths: list[str] | None = None) -> dict[str, Any]:
        return asdict(guarded(tools.diagnose, text, paths))

    @server.tool(
        name="explain",
        title="Explain one rule on a log",
        description=(
            "Why one rule (or each rule of an entry) did or did not fire on a log: which "
            "matcher hit which lines, near misses, series, detector outputs and the condition's "
            "values. `rule` is a rule id or an entry id; give `text` or `paths` as for diagnose."
        ),
        annotations=read_only,
    )
    def explain(
        rule: str, text: str | None = None, paths: list[str] | None = None
    ) -> dict[str, Any]:
        return asdict(guarded(tools.explain, rule, text, paths))

    @server.tool(
        name="search_entries",
        title="Find entries for an error line",
        description=(
            "The entries that best match an error line or some words: first those whose rules "
            "match the text, then those whose own words are closest, each with its quick answer."
        ),
        annotations=read_only,
    )
    def search_entries(query: str, limit: int = 5) -> dict[str, Any]:
        return asdict(guarded(tools.search_entries, query, limit))

    @server.tool(
        name="get_entry",
        title="Read an entry",
        description=(
            "An entry's sections as Markdown: quick answer, summary, mechanism, symptoms, how "
            "to confirm, the fix in tiers, how to verify it, prevention, related entries."
        ),
        annotations=read_only,
    )
    def get_entry(entry_id: str) -> str:
        return str(guarded(tools.get_entry, entry_id))

    def resource(read: Callable[[str], str], wanted: str) -> str:
        """A resource read one call at a time; an unknown id is the protocol's not-found."""
        try:
            with one_at_a_time:
                return read(wanted)
        except TrainwreckError as exc:
            raise ResourceNotFoundError(exc.report()) from None

    @server.resource(
        "trainwreck://entries/{entry_id}",
        name="entry",
        description="An entry's sections as Markdown",
        mime_type="text/markdown",
    )
    def entry_resource(entry_id: str) -> str:
        return resource(tools.get_entry, entry_id)

    @server.resource(
        "trainwreck://rules/{rule_id}",
        name="rule",
        description="A detection rule in its compiled form (JSON)",
        mime_type="application/json",
    )
    def rule_resource(rule_id: str) -> str:
        return resource(tools.get_rule, rule_id)

    return server


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve diagnose, explain and the entries to a coding assistant over MCP (stdio). "
        "Register `trainwreck mcp --root CHECKOUT` as a stdio server in the assistant."
    )
    parser.add_argument("--no-installed", action="store_true", help="ignore installed rule packs")


def run(args: argparse.Namespace) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401 - before the rules load: fail fast without it
    except ImportError as exc:
        raise UsageError(
            f"trainwreck mcp needs the MCP SDK 2.x: pip install 'trainwreck[mcp]' ({exc})"
        ) from None
    server = build_server(Tools(args.root, use_installed=not args.no_installed))
    server.run(transport="stdio")
    return 0
