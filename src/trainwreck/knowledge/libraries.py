"""The installed libraries, as `check` sees them: their names, environment variables and keys.

Nothing here imports a library into the checking process:

- dotted names and call signatures are looked up by `lookup.py`, run with this interpreter in a
  process of its own, one per library, all at once, each with a timeout;
- environment variables are the capitalised tokens found in the library's installed files (its
  Python source, its headers and the strings of its shared libraries), or, for C libraries whose
  source is not installed (NCCL, the CUDA driver), in `known_env.yaml`;
- config keys and allocator options are read statically from the installed files.

Every answer is cached by library version (and Python version) in
`stamps.shared_cache_dir(root)/libraries/`, so a second check asks no library anything. A library
that is not installed, fails to import or times out is reported once, as a warning, by the caller.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.metadata
import importlib.util
import itertools
import json
import mmap
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainwreck import stamps

CACHE_FORMAT = 1
LOOKUP_TIMEOUT_S = 180.0
KNOWN_ENV = Path(__file__).with_name("known_env.yaml")
_LOOKUP_SCRIPT = Path(__file__).with_name("lookup.py")
_SCANNED_SUFFIXES = (".py", ".pyi", ".h", ".hpp", ".cuh", ".c", ".cc", ".cpp", ".cu", ".so")
_TOKEN = re.compile(rb"[A-Z0-9_]*")


@dataclass(frozen=True)
class Library:
    """One top-level package as installed (version None: not installed)."""

    root: str
    version: str | None
    location: Path | None

    @property
    def label(self) -> str:
        return f"{self.root} {self.version}" if self.version else self.root


@dataclass
class Answer:
    """What one library said about the names asked of it."""

    library: Library
    names: dict[str, list[str]] = field(default_factory=dict)  # name -> [status, reason]
    callees: dict[str, list[str] | None] = field(default_factory=dict)
    failure: str | None = None  # the library could not be asked at all


@functools.cache
def library(root: str) -> Library:
    """Where `root` is installed and its distribution's version, without importing it."""
    try:
        spec = importlib.util.find_spec(root)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return Library(root, None, None)
    locations = list(spec.submodule_search_locations or [])
    location = Path(locations[0]) if locations else Path(spec.origin or "").parent
    version = None
    # The distribution is usually named like the package (metadata normalises - and _); only
    # when it is not, ask for the whole map, which reads every installed distribution.
    for distribution in itertools.chain([root], _distributions(root)):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = importlib.metadata.version(distribution)
            break
    return Library(root, version or "unknown", location)


def _distributions(root: str) -> Iterable[str]:
    yield from importlib.metadata.packages_distributions().get(root, [])


def _cache_file(cache: Path, lib: Library, kind: str) -> Path:
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return cache / "libraries" / f"{lib.root}-{lib.version}-{python}-{kind}.json"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == CACHE_FORMAT else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**data, "format": CACHE_FORMAT}, sort_keys=True), "utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only checkout checks, it only asks again next time


def cache_for(root: Path) -> Path:
    return stamps.shared_cache_dir(root)


# --- names and signatures --------------------------------------------------------------------


class Lookups:
    """The questions to the installed libraries, asked on construction and answered by
    `answers()`: {root: (names, callees)}. Cached answers are reused; the rest are asked in one
    process per library, all running side by side while the caller does other work.

        with Lookups(requests, cache) as lookups:
            ...                                    # scan files meanwhile
            answers = lookups.answers()
    """

    def __init__(
        self,
        requests: dict[str, tuple[set[str], set[str]]],
        cache: Path,
        timeout: float = LOOKUP_TIMEOUT_S,
    ) -> None:
        self.cache = cache
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self._answers: dict[str, Answer] = {}
        self._pending: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self._workdir = tempfile.TemporaryDirectory(prefix="trainwreck-lookup-")
        script = _LOOKUP_SCRIPT.read_text(encoding="utf-8")
        try:
            for root, (names, callees) in sorted(requests.items()):
                self._start(root, names, callees, script)
        except BaseException:
            self.close()
            raise

    def _start(self, root: str, names: set[str], callees: set[str], script: str) -> None:
        lib = library(root)
        answer = self._answers[root] = Answer(lib)
        if lib.version is None:
            return
        cached = _read_cache(_cache_file(self.cache, lib, "names"))
        answer.names = dict(cached.get("names", {}))
        answer.callees = dict(cached.get("callees", {}))
        ask_names = sorted(n for n in names if n not in answer.names)
        ask_callees = sorted(c for c in callees if c not in answer.callees)
        if not ask_names and not ask_callees:
            return
        folder = Path(self._workdir.name)
        out, request = folder / f"{root}.json", folder / f"{root}.request.json"
        request.write_text(
            json.dumps({"root": root, "names": ask_names, "callees": ask_callees}), "utf-8"
        )
        with open(request, "rb") as stdin:
            process = subprocess.Popen(
                [sys.executable, "-c", script, str(out)],
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=folder,
                env={**os.environ, **_QUIET_ENV},
            )
        self._pending[root] = (process, out)

    def answers(self) -> dict[str, Answer]:
        """Every library's answer, waiting for the processes still running (until the
        deadline, after which a library is a failure)."""
        for root, (process, out) in list(self._pending.items()):
            left = max(self.deadline - time.monotonic(), 0.0)
            _collect(self._answers[root], process, out, left, self.timeout, self.cache)
            del self._pending[root]
        self.close()
        return self._answers

    def close(self) -> None:
        for process, _ in self._pending.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stderr:
                process.stderr.close()
        self._pending.clear()
        self._workdir.cleanup()

    def __enter__(self) -> Lookups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def look_up(
    requests: dict[str, tuple[set[str], set[str]]],
    cache: Path,
    timeout: float = LOOKUP_TIMEOUT_S,
) -> dict[str, Answer]:
    """Ask the libraries and wait for their answers (see `Lookups`)."""
    with Lookups(requests, cache, timeout) as lookups:
        return lookups.answers()


# Libraries that look for a network, a GPU or a tokenizer pool while importing: keep them quiet.
_QUIET_ENV = {
    "PYTHONWARNINGS": "ignore",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}


def _collect(
    answer: Answer,
    process: subprocess.Popen[bytes],
    out: Path,
    left: float,
    timeout: float,
    cache: Path,
) -> None:
    try:
        _, stderr = process.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        answer.failure = f"importing {answer.library.label} took longer than {timeout:.0f} s"
        return
    try:
        result = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        last = (stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        answer.failure = f"looking up names in {answer.library.label} failed: {last[0][:200]}"
        return
    names = result.get("names", {})
    import_failed = [r for r in names.values() if r[0] == "unknown" and r[1].startswith("import ")]
    if names and len(import_failed) == len(names) and " failed: " in import_failed[0][1]:
        root_failure = import_failed[0][1]
        if root_failure.startswith(f"import {answer.library.root} failed"):
            answer.failure = root_failure[:300]
            return
    answer.names.update(names)
    answer.callees.update(result.get("callees", {}))
    _write_cache(
        _cache_file(cache, answer.library, "names"),
        {"names": answer.names, "callees": answer.callees},
    )


# --- environment variables -------------------------------------------------------------------


def env_tokens(lib: Library, prefixes: Iterable[str], cache: Path) -> frozenset[str]:
    """Every capitalised token starting with one of `prefixes` in the library's installed
    files: its sources and headers, and the read-only data (string literals) of its shared
    libraries."""
    if lib.version is None or lib.location is None:
        return frozenset()
    starts = sorted({prefix.encode() for prefix in prefixes})
    return _env_tokens(lib, tuple(starts), cache)


@functools.cache
def _env_tokens(lib: Library, starts: tuple[bytes, ...], cache: Path) -> frozenset[str]:
    path = _cache_file(cache, lib, "env")
    cached = _read_cache(path)
    if isinstance(cached.get("tokens"), list) and cached.get("prefixes") == [
        s.decode() for s in starts
    ]:
        return frozenset(cached["tokens"])
    found: set[str] = set()
    folders = [lib.location, lib.location.with_name(lib.location.name + ".libs")]
    for folder in folders:
        if not folder.is_dir():
            continue
        for file in folder.rglob("*"):
            if _scanned(file):
                found |= _tokens_in(file, starts)
    _write_cache(path, {"tokens": sorted(found), "prefixes": [s.decode() for s in starts]})
    return frozenset(found)


def _scanned(path: Path) -> bool:
    name = path.name
    return (name.endswith(_SCANNED_SUFFIXES) or ".so." in name) and path.is_file()


def _tokens_in(path: Path, starts: Iterable[bytes]) -> set[str]:
    try:
        data = _read_only_data(path) if ".so" in path.name else path.read_bytes()
    except (OSError, ValueError):
        return set()
    found = set()
    for start in starts:
        index = data.find(start)
        while index >= 0:
            # not inside a longer capitalised token; a lower-case letter before is fine, as
            # compilers (Rust's in particular) store string literals back to back
            before = data[index - 1 : index]
            if not (before.isupper() or before.isdigit() or before == b"_"):
                token = _TOKEN.match(data, index)
                if token:
                    found.add(token.group().decode())
            index = data.find(start, index + 1)
    return found


def _read_only_data(path: Path) -> bytes:
    """The read-only data sections of an ELF shared library (where its string literals are),
    read through mmap so that the code, nine tenths of libtorch, is never read; the whole
    file when it is not a 64-bit ELF file."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"\x7fELF" or data[4] != 2:
            return bytes(data)
        order = "<" if data[5] == 1 else ">"
        (table,) = struct.unpack_from(order + "Q", data, 0x28)
        entry_size, count, names_index = struct.unpack_from(order + "HHH", data, 0x3A)
        sections = [
            struct.unpack_from(order + "IIQQQQ", data, table + i * entry_size) for i in range(count)
        ]
        names_offset = sections[names_index][4]
        pieces = []
        for name, _, _, _, offset, size in sections:
            start = names_offset + name
            if data[start : data.find(b"\0", start)].startswith(b".rodata"):
                pieces.append(data[offset : offset + size])
        return b"\0".join(pieces) if pieces else bytes(data)


@functools.cache
def known_env() -> dict[str, dict[str, Any]]:
    """known_env.yaml: {list name: {library, source, tags, variables: {name: versions}}}."""
    try:
        data = yaml.safe_load(KNOWN_ENV.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


# --- config keys and allocator options (read statically) -------------------------------------


def deepspeed_config_keys(lib: Library, cache: Path) -> frozenset[str]:
    """Every key a DeepSpeed config can hold: the fields (and aliases) of its pydantic config
    models and the string constants its config readers look up."""
    return _static(lib, cache, "config", _deepspeed_keys)


def accelerate_config_keys(lib: Library, cache: Path) -> frozenset[str]:
    """The fields of accelerate's config-file dataclasses and the `fsdp_*` / `deepspeed_*`
    options `accelerate launch` reads from a config file."""
    return _static(lib, cache, "config", _accelerate_keys)


def allocator_options(lib: Library, cache: Path) -> frozenset[str]:
    """The options PyTorch's allocator config parser knows (PYTORCH_ALLOC_CONF and its aliases):
    the identifiers among libc10's strings and the CUDA keys its header lists. Empty when this
    torch does not show them (older releases parse them only in the CUDA library)."""
    return _static(lib, cache, "alloc", _allocator_options)


@functools.cache
def _static(lib: Library, cache: Path, kind: str, read: Any) -> frozenset[str]:
    if lib.version is None or lib.location is None:
        return frozenset()
    path = _cache_file(cache, lib, kind)
    cached = _read_cache(path)
    if isinstance(cached.get("keys"), list):
        return frozenset(cached["keys"])
    keys = set(read(lib.location))
    _write_cache(path, {"keys": sorted(keys)})
    return frozenset(keys)


def _python_files(folder: Path, parts: Iterable[str] = ()) -> Iterable[Path]:
    for part in parts or [""]:
        base = folder / part
        if base.is_file():
            yield base
        elif base.is_dir():
            yield from sorted(base.rglob("*.py"))


def _parse(path: Path) -> ast.AST | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return None


def _deepspeed_keys(location: Path) -> set[str]:
    keys: set[str] = set()
    for path in _python_files(location):
        if "config" not in path.name and "constants" not in path.name:
            continue  # the config models and the key constants live in these files
        tree = _parse(path)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_config_model(node):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        keys.add(item.target.id)
                        keys |= _aliases(item.value)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                value = node.value.value
                if isinstance(value, str) and all(
                    isinstance(t, ast.Name) and t.id.isupper() for t in node.targets
                ):
                    keys.add(value)
    return keys


def _is_config_model(node: ast.ClassDef) -> bool:
    names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    return any(n.endswith(("ConfigModel", "BaseModel", "Config")) for n in names)


def _aliases(value: ast.AST | None) -> set[str]:
    if not isinstance(value, ast.Call):
        return set()
    return {
        k.value.value
        for k in value.keywords
        if k.arg == "alias" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
    }


def _accelerate_keys(location: Path) -> set[str]:
    keys: set[str] = set()
    for path in _python_files(location, ["commands"]):
        tree = _parse(path)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        keys.add(item.target.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                option = node.value.lstrip("-")
                if re.fullmatch(r"(?:fsdp|deepspeed|megatron_lm|dynamo|fp8|ipex)_\w+", option):
                    keys.add(option)
    return keys


_IDENTIFIER = re.compile(rb"(?<=\x00)([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?=\x00)")
_C_STRINGS = re.compile(r'((?:"[^"\n]*"\s*)+)')


def _allocator_options(location: Path) -> set[str]:
    options: set[str] = set()
    for library in sorted((location / "lib").glob("libc10*.so*")):
        try:
            data = library.read_bytes()
        except OSError:
            continue
        options |= {m.decode() for m in _IDENTIFIER.findall(data)}
    header = location / "include" / "c10" / "cuda" / "CUDAAllocatorConfig.h"
    try:
        text = header.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    keys_body = text.partition("getKeys()")[2].partition("};")[0]
    for literal in _C_STRINGS.findall(keys_body):
        # adjacent literals are one string in C ("release_lock_on_cud" "amalloc")
        options.add("".join(re.findall(r'"([^"]*)"', literal)))
    return options if "max_split_size_mb" in options else set()
