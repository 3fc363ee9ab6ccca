"""wandb-init-timeout: against a server stand-in that accepts connections and never answers, the
mode chooser picks offline and the run completes; forcing online with the same server times out."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "wandb-init-timeout"

# The environment the example leaves to the reader: a W&B host that never answers (no real network).
SILENT_SERVER = """
import os, socket, threading
_server = socket.socket()
_server.bind(("127.0.0.1", 0))
_server.listen(16)
_held = []
threading.Thread(target=lambda: [_held.append(_server.accept()) for _ in iter(int, 1)], daemon=True).start()
os.environ["WANDB_BASE_URL"] = f"http://127.0.0.1:{_server.getsockname()[1]}"
"""


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "WANDB_API_KEY": "x" * 40,
        "WANDB_DIR": str(tmp_path),
        "WANDB_CONFIG_DIR": str(home),
        "WANDB_CACHE_DIR": str(home),
        "WANDB_ERROR_REPORTING": "false",
        "HOME": str(home),
    }


def test_a_silent_server_gives_offline_mode_and_the_run_completes(tmp_path: Path) -> None:
    code = SILENT_SERVER + example(ENTRY, "code_examples[0]")
    checks = (
        "\nassert mode == 'offline'\nassert len(_held) >= 1  # the probe did reach the stand-in\n"
    )
    result = run(code + checks, tmp_path, timeout=300, env=_env(tmp_path))
    assert result.returncode == 0, result.output
    assert "wandb mode offline" in result.stdout
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_forcing_online_with_the_same_server_times_out(tmp_path: Path) -> None:
    code = SILENT_SERVER + example(ENTRY, "code_examples[0]").replace(
        'run = wandb.init(project="tiny", mode=mode)',
        'run = wandb.init(project="tiny", mode="online", settings=wandb.Settings(init_timeout=3))',
    )
    assert 'mode="online"' in code
    result = run(code, tmp_path, timeout=300, env=_env(tmp_path))
    assert result.returncode != 0
    assert "CommError: Timed out initializing run" in result.output
