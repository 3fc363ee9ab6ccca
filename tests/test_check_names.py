"""Names checked against the installed libraries (issue 26): what is read as a citation, where a
problem is placed, and how the lookups behave when a library is missing, broken, slow or cached.

The planted cases that fail `trainwreck check` at file:line (a non-existent torch name, misspelled
environment variables, an unknown keyword, config key and allocator option) are in
tests/check_cases/ with their lines in EXPECTED of tests/test_check.py.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trainwreck.check import check_entries
from trainwreck.knowledge import libraries, pycode
from trainwreck.knowledge.checked import content_digest
from trainwreck.knowledge.citations import code_citations, document_citations, text_citations
from trainwreck.knowledge.names import offset_position
from trainwreck.model import parse_yaml

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "check_cases"


def cited(citations) -> set[tuple[str, str, str]]:
    return {(c.kind, c.name, c.callee) for c in citations}


# --- what is a citation ------------------------------------------------------------------------


def test_python_code_follows_imports_and_conventional_names() -> None:
    code = (
        "import torch.distributed as dist\n"
        "from torch.utils.checkpoint import checkpoint as ck\n"
        "import mylib\n"
        "F = make_something()\n"
        "dist.all_reduce(x, async_op=True)\n"
        "h = ck(block, h, use_reentrant=False)\n"
        "arr = np.zeros(3)\n"  # np left unbound: numpy
        "F.whatever(1)\n"  # F is the snippet's own here
        "mylib.thing()\n"
    )
    found = cited(code_citations(code, "python", ("code",)))
    assert ("name", "torch.distributed", "") in found
    assert ("name", "torch.utils.checkpoint.checkpoint", "") in found
    assert ("name", "torch.distributed.all_reduce", "") in found
    assert ("keyword", "async_op", "torch.distributed.all_reduce") in found
    assert ("keyword", "use_reentrant", "torch.utils.checkpoint.checkpoint") in found
    assert ("name", "numpy.zeros", "") in found
    assert not {name for _, name, _ in found} & {"torch.nn.functional.whatever", "mylib.thing"}


def test_fragments_inline_spans_and_shell_commands() -> None:
    fragment = "if bad:\n    continue\ntorch.cuda.synchronize()\n"
    assert ("name", "torch.cuda.synchronize", "") in cited(
        code_citations(fragment, "python", ("code",))
    )
    prose = "Load with `torch.load(path, mmap=True)`; a sentence naming torch.save is prose."
    found = cited(text_citations(prose, ("summary",)))
    assert found == {("name", "torch.load", ""), ("keyword", "mmap", "torch.load")}
    shell = "python -m deepspeed.checkpoint.ds_to_universal --input_folder a\n"
    shell += 'python -c "import torch; print(torch.version.cuda)"'
    found = cited(code_citations(shell, "bash", ("code",)))
    assert ("name", "deepspeed.checkpoint.ds_to_universal", "") in found
    assert ("name", "torch.version.cuda", "") in found


def test_environment_variables_but_not_families_or_words() -> None:
    text = (
        "export NCCL_DEBUG=INFO; echo $TORCH_NCCL_ASYNC_ERROR_HANDLING; the NCCL_IB_* family, "
        "TORCH_NCCL_ prefixed names, CUDA_PATHenvironment (a word), LOCAL_RANK (no prefix)"
    )
    names = {c.name for c in text_citations(text, ("mechanism",)) if c.kind == "env"}
    assert names == {"NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}
    tagged = "CUDA_SETUP: WARNING! libcudart.so not found\nset NCCL_SOCKET_IFNAME: eth0"
    names = {c.name for c in text_citations(tagged, ("examples",)) if c.kind == "env"}
    assert names == {"NCCL_SOCKET_IFNAME"}  # a line's leading tag is not a variable


def test_allocator_options_and_config_keys() -> None:
    text = 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,max_split_size_mb:64"'
    options = {c.name for c in code_citations(text, "python", ("code",)) if c.kind == "alloc"}
    assert options == {"expandable_segments", "max_split_size_mb"}
    config = '{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},\n'
    config += ' "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "anything": 1}}}'
    keys = {(c.name, c.callee) for c in code_citations(config, "json", ("code",))}
    assert ("offload_param", "zero_optimization") in keys
    assert ("device", "zero_optimization.offload_param") in keys
    assert not any(name in ("lr", "anything") for name, _ in keys)  # an optimizer's arguments
    docker = "services:\n  train:\n    shm_size: 16gb\n"
    assert code_citations(docker, "yaml", ("code",)) == []  # not a DeepSpeed/accelerate config


def test_rule_matchers_and_entry_links_are_not_read() -> None:
    rule = {
        "id": "r",
        "description": "Set `torch.cuda.memory._record_memory_history` and NCCL_DEBUG=INFO.",
        "matchers": {"m": {"regex": r"TORCH_[A-Z]+ (?P<x>\S+)"}},
    }
    found = cited(document_citations(rule, rule=True))
    assert found == {
        ("name", "torch.cuda.memory._record_memory_history", ""),
        ("env", "NCCL_DEBUG", ""),
    }


# --- where a problem is shown ------------------------------------------------------------------

SCALARS = """\
plain: one two
  three TORCH_TARGET four
single: 'it''s a TORCH_TARGET'
double: "tab\\t and TORCH_TARGET"
literal: |-
  first line
    indented TORCH_TARGET
folded: >-
  first
  second TORCH_TARGET
"""


@pytest.mark.parametrize(
    ("key", "line", "column"),
    [("plain", 2, 9), ("single", 3, 18), ("double", 4, 20), ("literal", 7, 14), ("folded", 10, 10)],
)
def test_a_problem_points_inside_its_scalar(key: str, line: int, column: int) -> None:
    document = parse_yaml(SCALARS, "f.yaml")
    value = document.data[key]
    start_line, start_column = document.position((key,))
    lines = SCALARS.splitlines()
    at = offset_position(lines, start_line, start_column, value.index("TORCH_TARGET"))
    assert at == (line, column)
    assert lines[line - 1][column - 1 :].startswith("TORCH_TARGET")


# --- how libraries are asked -------------------------------------------------------------------


def fake_library(site: Path, name: str, version: str, source: str) -> None:
    """An installed package `name` with a distribution of that version."""
    (site / name).mkdir(parents=True, exist_ok=True)
    (site / name / "__init__.py").write_text(source, encoding="utf-8")
    for old in site.glob(f"{name}-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path (this process) and PYTHONPATH (the lookups' processes)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", f"{folder}:{REPO / 'src'}")
    libraries.library.cache_clear()
    importlib.invalidate_caches()
    yield folder
    libraries.library.cache_clear()


def test_answers_are_cached_by_library_version(site: Path, tmp_path: Path) -> None:
    fake_library(site, "twcachedlib", "1.0", "present = 1\n")
    cache = tmp_path / "cache"
    first = libraries.look_up({"twcachedlib": ({"twcachedlib.present"}, set())}, cache)
    assert first["twcachedlib"].names["twcachedlib.present"][0] == "ok"
    assert list((cache / "libraries").glob("twcachedlib-1.0-*-names.json"))
    # the attribute goes away in the same version: the cached answer is kept (no new process)
    fake_library(site, "twcachedlib", "1.0", "")
    again = libraries.look_up({"twcachedlib": ({"twcachedlib.present"}, set())}, cache)
    assert again["twcachedlib"].names["twcachedlib.present"][0] == "ok"
    # a new version is asked again
    fake_library(site, "twcachedlib", "2.0", "")
    libraries.library.cache_clear()
    importlib.invalidate_caches()
    new = libraries.look_up({"twcachedlib": ({"twcachedlib.present"}, set())}, cache)
    assert new["twcachedlib"].library.version == "2.0"
    assert new["twcachedlib"].names["twcachedlib.present"][0] == "missing"


def test_a_library_that_fails_to_import_is_reported_not_raised(site: Path, tmp_path: Path) -> None:
    fake_library(site, "twbrokenlib", "0.1", "raise ImportError('needs libfoo.so')\n")
    answers = libraries.look_up(
        {"twbrokenlib": ({"twbrokenlib.a", "twbrokenlib.b"}, set())}, tmp_path
    )
    failure = answers["twbrokenlib"].failure
    assert failure and "import twbrokenlib failed" in failure and "needs libfoo.so" in failure


def test_a_library_that_hangs_is_stopped_at_the_timeout(site: Path, tmp_path: Path) -> None:
    fake_library(site, "twslowlib", "0.1", "import time\ntime.sleep(60)\n")
    start = time.monotonic()
    answers = libraries.look_up({"twslowlib": ({"twslowlib.a"}, set())}, tmp_path, timeout=2)
    assert time.monotonic() - start < 30
    assert answers["twslowlib"].failure == "importing twslowlib 0.1 took longer than 2 s"


def make_repo(tmp_path: Path, entry: dict) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "schemas", root / "schemas")
    (root / "entries").mkdir()
    text = "# yaml-language-server: $schema=../schemas/entry.schema.json\n"
    text += yaml.safe_dump(entry, sort_keys=False, allow_unicode=True)
    (root / "entries" / f"{entry['id']}.yaml").write_text(text, encoding="utf-8")
    return root


def base_entry(entry_id: str, code: str, **extra) -> dict:
    data = yaml.safe_load((CASES / "base-entry.yaml").read_text(encoding="utf-8"))
    data["id"] = entry_id
    data["code_examples"] = [{"framework": "pytorch", "code": code, "why": "It shows the name."}]
    data.update(extra)
    return data


def test_missing_broken_and_removed_names_in_check(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_library(site, "twrealib", "3.1", "kept = 1\n")
    fake_library(site, "twbrokenlib2", "0.1", "raise RuntimeError('no GPU driver')\n")
    monkeypatch.setattr(
        pycode, "LIBRARY_ROOTS", pycode.LIBRARY_ROOTS | {"twrealib", "twbrokenlib2", "twabsent"}
    )
    monkeypatch.setenv("TRAINWRECK_CACHE_DIR", str(tmp_path / "cache"))
    code = (
        "import twrealib, twbrokenlib2, twabsent\n"
        "twrealib.kept; twrealib.gone; twrealib.old_name\n"
        "twbrokenlib2.a; twbrokenlib2.b\n"
        "twabsent.x\n"
    )
    removed = {
        "removed": [
            {"name": "twrealib.old_name", "removed_in": "twrealib 3.0"},
            {"name": "twrealib.never_cited", "removed_in": "twrealib 2.0"},
        ]
    }
    root = make_repo(tmp_path, base_entry("names-case", code, names=removed))
    problems, _ = check_entries(root, [root / "entries" / "names-case.yaml"])
    shown = [(p.severity, p.message) for p in problems]
    errors = [m for s, m in shown if s == "error"]
    assert errors == [
        "twrealib.gone does not exist in twrealib 3.1 (twrealib has no attribute or submodule 'gone')"
    ]
    # What this machine cannot check is a note (build --strict ignores it), one per reason.
    notes = [m for s, m in shown if s == "note"]
    assert any(m.startswith("import twbrokenlib2 failed") and "3 name(s)" in m for m in notes)
    assert any(m.startswith("twabsent is not installed: 2 name(s)") for m in notes)
    assert len(notes) == 2
    warnings = [m for s, m in shown if s == "warning"]
    assert warnings == [m for m in warnings if "'twrealib.never_cited' is listed as removed" in m]
    assert len(warnings) == 1


def test_an_unknown_environment_variable_in_a_rule(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    root = make_repo(tmp_path, base_entry("env-case", "print(1)"))
    (root / "rules").mkdir()
    (root / "rules" / "env-case.yaml").write_text(
        "id: env-case\nentry: env-case\ntitle: t\n"
        "description: Set NCCL_DEBUG=INFO and NCCL_SOCKET_IFNAM=eth0 first.\n",
        encoding="utf-8",
    )
    problems, _ = check_entries(root, [root / "entries" / "env-case.yaml"])
    found = [str(p) for p in problems if "NCCL_" in p.message]
    assert len(found) == 1 and found[0].startswith("rules/env-case.yaml:4:38: description: ")
    assert "environment variable NCCL_SOCKET_IFNAM is unknown: not read by NCCL" in found[0]


def test_check_never_imports_the_libraries_it_checks(tmp_path: Path) -> None:
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from trainwreck.check import check_entries\n"
        f"problems, _ = check_entries(Path({str(REPO)!r}), "
        f"[Path({str(REPO / 'entries' / 'torch-load-weights-only.yaml')!r})])\n"
        "heavy = ('torch', 'transformers', 'deepspeed', 'lightning', 'accelerate')\n"
        "print(sorted(m for m in heavy if m in sys.modules), len(problems))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "TRAINWRECK_CACHE_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("[] "), done.stdout


def test_runs_markers_do_not_change_the_checked_digest() -> None:
    data = yaml.safe_load((CASES / "base-entry.yaml").read_text(encoding="utf-8"))
    marked = json.loads(json.dumps(data))
    marked["code_examples"][0]["runs"] = "fragment"
    assert content_digest(marked) == content_digest(data)
    marked["code_examples"][0]["code"] += " --strict"
    assert content_digest(marked) != content_digest(data)


# --- what the libraries' files say ---------------------------------------------------------------


def test_known_env_lists_say_where_they_come_from() -> None:
    known = libraries.known_env()
    for name in ("nccl", "cuda"):
        assert {"library", "source", "tags", "variables"} <= set(known[name]), name
        assert known[name]["source"].startswith("https://")
    assert {"NCCL_IB_TIMEOUT", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG"} <= set(
        known["nccl"]["variables"]
    )
    assert known["nccl"]["variables"]["NCCL_IB_TIMEOUT"].startswith("v2.")


def test_torch_files_name_its_variables_and_allocator_options(tmp_path: Path) -> None:
    torch = libraries.library("torch")
    if torch.version is None:
        pytest.skip("torch is not installed")
    tokens = libraries.env_tokens(torch, ["TORCH_", "PYTORCH_", "NCCL_"], tmp_path)
    # from the Python source, the headers and libc10's read-only data
    assert {
        "TORCH_DISTRIBUTED_DEBUG",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "PYTORCH_ALLOC_CONF",
    } <= tokens
    options = libraries.allocator_options(torch, tmp_path)
    assert {"expandable_segments", "max_split_size_mb", "garbage_collection_threshold"} <= options
    assert "expandable_segment" not in options


def test_deepspeed_config_keys_include_fields_aliases_and_constants(tmp_path: Path) -> None:
    deepspeed = libraries.library("deepspeed")
    if deepspeed.version is None:
        pytest.skip("deepspeed is not installed")
    keys = libraries.deepspeed_config_keys(deepspeed, tmp_path)
    assert {"zero_optimization", "stage", "prefetch_bucket_size"} <= keys  # fields
    assert "stage3_prefetch_bucket_size" in keys  # an alias
    assert {"train_micro_batch_size_per_gpu", "gradient_clipping", "load_universal"} <= keys
