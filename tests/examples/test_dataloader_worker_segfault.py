"""dataloader-worker-segfault: a record whose header points outside the file raises a Python error
in the worker (named, with the file) instead of reaching native code."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "dataloader-worker-segfault"


def test_good_records_load_and_a_bad_header_is_reported(tmp_path: Path) -> None:
    setup = """
import os, struct
os.makedirs("data")
HEADER = struct.Struct("<4sQQ")
payload = bytes(range(16))
open("data/a.rec", "wb").write(HEADER.pack(b"REC1", HEADER.size, 16) + payload)
open("data/b.rec", "wb").write(HEADER.pack(b"REC1", HEADER.size, 16) + payload)
open("data/c.rec", "wb").write(HEADER.pack(b"REC1", HEADER.size, 10**9) + payload)   # corrupt
"""
    assert run(setup, tmp_path, name="setup.py").returncode == 0
    driver = """
ds = Records("data/")
assert float(ds[0]) == 7.5 and float(ds[1]) == 7.5
try:
    for batch in DataLoader(Records("data/"), batch_size=1, num_workers=2):
        pass
except ValueError as e:
    print("reported:", str(e).splitlines()[-1])
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "reported: ValueError: data/c.rec: header points outside the file" in result.stdout
