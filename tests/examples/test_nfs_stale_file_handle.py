"""nfs-stale-file-handle: a read that hits ESTALE is retried with a fresh open, a lasting ESTALE
or another error is raised."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "nfs-stale-file-handle"

# open() that fails with ESTALE the first `stale` times, as a file replaced on the NFS server does
STALE_OPEN = """
import builtins, errno
_open, calls = builtins.open, []
def flaky_open(path, *args, **kwargs):
    calls.append(path)
    if str(path).endswith(".bin") and len(calls) <= STALE:
        raise OSError(errno.ESTALE, "Stale file handle", path)
    return _open(path, *args, **kwargs)
builtins.open = flaky_open
"""


def test_read_bytes_retries_a_stale_handle(tmp_path: Path) -> None:
    (tmp_path / "shard.bin").write_bytes(b"payload")
    driver = """
assert read_bytes("shard.bin", delay_s=0.01) == b"payload" and len(calls) == 3
calls.clear(); STALE = 99
try:
    read_bytes("shard.bin", retries=2, delay_s=0.01)
except OSError as e:
    assert e.errno == errno.ESTALE and len(calls) == 3
    print("gave up after", len(calls))
"""
    code = "STALE = 2\n" + STALE_OPEN + example(ENTRY, "fix.primary.steps[0]") + driver
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
    assert "gave up after 3" in result.stdout
    assert result.stderr.count("ESTALE on shard.bin") == 4, result.stderr


def test_the_dataset_retries_and_loads(tmp_path: Path) -> None:
    driver = """
torch.save(torch.arange(3), "a.bin"); torch.save(torch.arange(5), "b.bin")
ds = ShardDataset(["a.bin", "b.bin"])
calls.clear(); STALE = 1
assert torch.equal(ds[1], torch.arange(5)) and len(calls) == 2
try:
    ShardDataset(["missing.bin"])[0]
except FileNotFoundError:
    print("other errors are raised")
"""
    code = "STALE = 0\n" + STALE_OPEN + example(ENTRY, "code_examples[0]") + driver
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
    assert "other errors are raised" in result.stdout
