"""`trainwreck mcp`, driven by the MCP SDK's own client over stdio: initialize, tools/list,
tools/call (good and bad arguments, a huge paste, a special file), resources; and the tools on
their own. Skipped without the `mcp` extra."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GC_RUN = ROOT / "tests" / "logs" / "python-gc-straggler" / "probe-run"
IMA_LINE = "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
TOOLS = {"diagnose", "explain", "search_entries", "get_entry"}


def server_parameters(cache: Path | None = None) -> StdioServerParameters:
    """`trainwreck mcp` over this checkout; `cache`: its own TRAINWRECK_CACHE_DIR."""
    env = {"PYTHONPATH": str(ROOT / "src")}
    for name in ("TRAINWRECK_CACHE_DIR", "HOME", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    if cache is not None:
        env["TRAINWRECK_CACHE_DIR"] = str(cache)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "trainwreck", "mcp", "--root", str(ROOT), "--no-installed"],
        env=env,
        cwd=str(ROOT),
    )


def text_of(result) -> str:
    return "\n".join(getattr(item, "text", "") for item in result.content)


async def session_run(tmp_path: Path, cache: Path) -> dict:
    """Every exchange of one session, recorded for the assertions."""
    seen: dict = {}
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below
    parameters = server_parameters(cache)
    try:
        async with (
            stdio_client(parameters, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            seen["init"] = await session.initialize()
            seen["tools"] = (await session.list_tools()).tools
            call = session.call_tool
            seen["diag_paths"] = await call("diagnose", {"paths": [str(GC_RUN)]})
            seen["diag_text"] = await call("diagnose", {"text": IMA_LINE})
            seen["huge"] = await call(
                "diagnose", {"text": "x" * 200 + "\n" + "filler line\n" * 800_000 + IMA_LINE}
            )
            seen["no_args"] = await call("diagnose", {})
            seen["wrong_type"] = await call("diagnose", {"paths": 42})
            seen["missing"] = await call("diagnose", {"paths": [str(tmp_path / "nope.log")]})
            seen["fifo"] = await call("diagnose", {"paths": [str(fifo)]})
            seen["explain"] = await call(
                "explain", {"rule": "cuda-illegal-memory-access", "text": IMA_LINE}
            )
            seen["explain_bad"] = await call("explain", {"rule": "../etc", "text": "x"})
            seen["search"] = await call("search_entries", {"query": IMA_LINE.strip(), "limit": 3})
            seen["entry"] = await call("get_entry", {"entry_id": "python-gc-straggler"})
            seen["entry_missing"] = await call("get_entry", {"entry_id": "python-gc-stragler"})
            seen["resource"] = await session.read_resource(
                "trainwreck://entries/nccl-collective-timeout"
            )
            seen["rule"] = await session.read_resource("trainwreck://rules/nan-loss-value")
            seen["after"] = await call("diagnose", {"text": IMA_LINE})
    finally:
        errlog.close()
    seen["stderr"] = (tmp_path / "server.err").read_text()
    return seen


# Written by other tests running beside this one (xdist workers), never by the server: its
# cache is a folder of its own.
NOT_WATCHED = {".git", "__pycache__", ".pytest_cache", "build", "site", "dist", ".venv"}


def tree_state(*bases: Path) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file under `bases`."""
    state = {}
    for base in bases:
        for folder, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if d not in NOT_WATCHED]
            for name in files:
                path = os.path.join(folder, name)
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                state[path] = (info.st_mtime_ns, info.st_size)
    return state


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict:
    """One session, with an empty cache folder of its own: the server compiles the rules in
    memory, and a cache it wrote would show."""
    cache = tmp_path_factory.mktemp("mcp-cache")
    before = tree_state(ROOT, cache)
    seen = anyio.run(session_run, tmp_path_factory.mktemp("mcp"), cache)
    after = tree_state(ROOT, cache)
    seen["written"] = sorted(path for path, value in after.items() if before.get(path) != value)
    return seen


def test_initialize_and_list_tools(session):
    assert session["init"].server_info.name == "trainwreck"
    tools = {tool.name: tool for tool in session["tools"]}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.input_schema["type"] == "object" and tool.description
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.open_world_hint is False
    assert set(tools["diagnose"].input_schema["properties"]) == {"text", "paths"}
    assert tools["explain"].input_schema["required"] == ["rule"]
    assert tools["diagnose"].output_schema is not None


def test_diagnose_gives_the_json_report_and_a_summary(session):
    result = session["diag_paths"]
    assert not result.is_error, text_of(result)
    data = result.structured_content
    finding = data["report"]["findings"][0]
    assert finding["entry"] == "python-gc-straggler"
    assert finding["evidence"] and finding["evidence"][0]["file"].endswith(".jsonl")
    assert data["summary"].startswith("1 finding") and "python-gc-straggler" in data["summary"]
    pasted = session["diag_text"].structured_content
    assert [f["entry"] for f in pasted["report"]["findings"]] == ["cuda-illegal-memory-access"]
    assert pasted["report"]["findings"][0]["evidence"][0]["file"] == "<pasted text>"


def test_a_huge_paste_is_cut_to_its_end_and_says_so(session):
    result = session["huge"]
    assert not result.is_error, text_of(result)
    data = result.structured_content
    assert any("only its last" in note for note in data["notes"])
    assert [f["entry"] for f in data["report"]["findings"]] == ["cuda-illegal-memory-access"]


@pytest.mark.parametrize(
    "name, message",
    [
        ("no_args", "give `text`"),
        ("wrong_type", "paths"),
        ("missing", "no such file or folder"),
        ("fifo", "not a regular file or folder"),
        ("explain_bad", "not a rule or entry id"),
        ("entry_missing", "did you mean python-gc-straggler"),
    ],
)
def test_bad_arguments_are_error_results_not_crashes(session, name, message):
    result = session[name]
    assert result.is_error
    assert message in text_of(result)
    assert "Traceback" not in text_of(result)


def test_the_server_keeps_serving_after_errors(session):
    assert not session["after"].is_error
    assert "Traceback" not in session["stderr"]


def test_explain_search_and_entries(session):
    explained = session["explain"].structured_content
    assert explained["explanations"][0]["rule"]["id"] == "cuda-illegal-memory-access-encountered"
    assert explained["explanations"][0]["fired"] is True
    hits = session["search"].structured_content["hits"]
    assert hits[0]["entry"] == "cuda-illegal-memory-access" and "rule" in hits[0]["why"]
    assert hits[0]["quick_answer"]
    entry = text_of(session["entry"])
    assert entry.startswith("# Python garbage collection") and "## Fix (primary)" in entry
    resource = session["resource"].contents[0]
    assert resource.mime_type == "text/markdown" and "## Quick answer" in resource.text
    rule = json.loads(session["rule"].contents[0].text)
    assert rule["id"] == "nan-loss-value" and rule["entry"] == "nan-loss"


def test_the_server_writes_nothing(session):
    """A whole session (rules compiled in memory, logs read) leaves every file of the checkout
    and of its own cache folder as it was, and adds none."""
    assert session["written"] == []


def test_a_client_that_disconnects_mid_call_ends_the_server_cleanly():
    """The client sends a large diagnose call and hangs up: the server exits 0, no traceback."""
    import subprocess

    parameters = server_parameters()
    server = subprocess.Popen(
        [parameters.command, *parameters.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, **(parameters.env or {})},
    )

    def send(message: dict) -> None:
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
    )
    assert b'"id":1' in server.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"name": "diagnose", "arguments": {"text": "filler line\n" * 1_000_000}}
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    server.stdin.close()
    server.stdout.close()
    assert server.wait(timeout=120) == 0
    assert b"Traceback" not in server.stderr.read()
