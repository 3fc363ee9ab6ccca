"""What an entry or a rule cites that a library must have: the names `check` verifies.

A citation is one name at one place in a document: a dotted Python name (`torch.cuda.memory.
_snapshot`), a keyword argument of a library call (`TrainingArguments(eval_strategy=...)`), an
environment variable (`NCCL_IB_TIMEOUT`), a `PYTORCH_CUDA_ALLOC_CONF` option or a config key
(DeepSpeed, accelerate). Where they are read from:

- Python names only from code: the `code` of code examples, confirm and fix steps (parsed with
  `ast`, so imports and aliases are followed) and inline code spans (`...`) in the text. A name in
  a plain sentence is not a citation;
- environment variables and allocator options from every text and code field (their spelling,
  PREFIX_NAME in capitals, is unambiguous);
- config keys from JSON and YAML code, and from Python dict literals that are DeepSpeed configs.

Each citation keeps the path of its scalar and the character offset inside it, so a problem can be
shown at file:line:col. Nothing here imports or looks up a library (see `knowledge.libraries`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from trainwreck.knowledge.pycode import (
    FREE_FORM_KEYS,
    Citation,
    PythonNames,
    parse_python,
    resolve_alias,
)
from trainwreck.model import Path_

ENV_PREFIXES = (
    "TORCHELASTIC_",
    "TORCHINDUCTOR_",
    "TORCHDYNAMO_",
    "TORCH_",
    "PYTORCH_",
    "NCCL_",
    "CUDA_",
    "CUBLAS_",
    "CUBLASLT_",
    "CUDNN_",
    "OMP_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "ACCELERATE_",
    "TOKENIZERS_",
    "DS_",
    "TRITON_",
    "BNB_",
)
# A token in capitals after one of the prefixes; one that ends in "_" or runs on into "*" or
# lower case is a family (NCCL_IB_*) or part of another word, not a variable.
_ENV = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(ENV_PREFIXES) + r")[A-Z0-9_]*")
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:128 (shell, Python, prose)
_ALLOC = re.compile(
    r"PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF[\"']?\]?\s*(?:=|,)\s*[\"']?"
    r"((?:[a-z_][a-z0-9_]*:[^\s,\"'`]+)(?:,[a-z_][a-z0-9_]*:[^\s,\"'`]+)*)"
)
_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
_PYTHON_M = re.compile(r"\bpython3?\s+-m\s+([A-Za-z_][\w.]*)")
_PYTHON_C = re.compile(r"\bpython3?\s+-c\s+(\"([^\"]*)\"|'([^']*)')")

PYTHON_LANGUAGES = frozenset({"python", "py", "python3"})
SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "zsh", "dockerfile"})
# Fields whose text is not the entry's claims about libraries (ids, links, the audit record).
SKIPPED_KEYS = frozenset(
    {"id", "url", "tags", "facets", "related", "checked", "names", "created", "updated"}
)
# A rule's matchers are regexes and its tests are paths: neither is a citation.
SKIPPED_RULE_KEYS = frozenset({"matchers", "tests", "condition", "report", "series", "detectors"})

# Top-level keys that make a JSON/YAML mapping or a Python dict a DeepSpeed config.
DEEPSPEED_MARKERS = frozenset(
    {
        "zero_optimization",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "bf16",
        "fp16",
        "zero_allow_untested_optimizer",
    }
)
# ... and the ones that make a YAML mapping an accelerate config file.
ACCELERATE_MARKERS = frozenset(
    {"compute_environment", "distributed_type", "fsdp_config", "deepspeed_config", "dynamo_config"}
)


@dataclass(frozen=True)
class CodeBlock:
    """A piece of code in an entry and what the entry says about it."""

    path: Path_  # of the `code` scalar
    code: str
    language: str
    runs: str | None  # cpu | gpu | fragment | None


def code_blocks(data: Any) -> Iterator[CodeBlock]:
    """The code of code examples, confirm items and fix steps (including verify), with the
    language each defaults to (python for code examples and fix steps, as the site renders them;
    a confirm item names its language)."""
    if not isinstance(data, dict):
        return
    places: list[tuple[Path_, Any, str]] = []
    for index, item in enumerate(_list(data.get("code_examples"))):
        places.append((("code_examples", index), item, "python"))
    for index, item in enumerate(_list(data.get("confirm"))):
        places.append((("confirm", index), item, ""))
    fix = data.get("fix") if isinstance(data.get("fix"), dict) else {}
    for tier in ("primary", "fallback", "emergency"):
        block = fix.get(tier)
        steps = block.get("steps") if isinstance(block, dict) else None
        for index, step in enumerate(_list(steps)):
            places.append((("fix", tier, "steps", index), step, "python"))
    for index, step in enumerate(_list(fix.get("verify"))):
        places.append((("fix", "verify", index), step, "python"))
    for path, item, default in places:
        if isinstance(item, dict) and isinstance(item.get("code"), str):
            language = str(item.get("language") or default).strip().lower()
            runs = item.get("runs") if isinstance(item.get("runs"), str) else None
            yield CodeBlock((*path, "code"), item["code"], language, runs)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def document_citations(data: Any, *, rule: bool = False) -> list[Citation]:
    """Every citation in an entry's (or, with rule=True, a rule's) data."""
    found: list[Citation] = []
    code_paths: set[Path_] = set()
    if not rule:
        for block in code_blocks(data):
            code_paths.add(block.path)
            found += code_citations(block.code, block.language, block.path)
    skipped = SKIPPED_RULE_KEYS | {"id", "entry"} if rule else SKIPPED_KEYS
    for path, text in _strings(data, ()):
        if path in code_paths or (path and path[0] in skipped):
            continue
        found += text_citations(text, path)
    return found


def _strings(value: Any, path: Path_) -> Iterator[tuple[Path_, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _strings(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _strings(child, (*path, index))


# --- text ------------------------------------------------------------------------------------


def text_citations(text: str, path: Path_) -> list[Citation]:
    """Environment variables and allocator options anywhere in the text, and the Python names
    of its inline code spans."""
    found = env_citations(text, path)
    for span in _SPAN.finditer(text):
        found += span_citations(span.group(1), path, span.start(1))
    return found


def env_citations(text: str, path: Path_, base: int = 0) -> list[Citation]:
    found = []
    for match in _ENV.finditer(text):
        after = text[match.end() : match.end() + 1]
        if match.group().endswith("_") or after == "*" or after.isalpha():
            continue
        if after == ":" and (match.start() == 0 or text[match.start() - 1] == "\n"):
            continue  # a log line's tag (bitsandbytes' `CUDA_SETUP: WARNING! ...`), not a variable
        found.append(Citation("env", match.group(), path, base + match.start()))
    for match in _ALLOC.finditer(text):
        start = match.start(1)
        for option in match.group(1).split(","):
            key = option.split(":", 1)[0]
            found.append(Citation("alloc", key, path, base + start))
            start += len(option) + 1
    return found


def span_citations(span: str, path: Path_, base: int) -> list[Citation]:
    """The library names in one inline code span: parsed as Python when it is Python (then its
    keyword arguments count too), else its dotted names."""
    for mode in ("eval", "exec"):
        try:
            tree = ast.parse(span, mode=mode)
        except (SyntaxError, ValueError):
            continue
        return PythonNames(span, path, base).visit_tree(tree)
    found = []
    for match in _DOTTED.finditer(span):
        dotted = resolve_alias(match.group(1))
        if dotted:
            found.append(
                Citation("name", dotted, path, base + match.start(1), dotted.split(".")[0])
            )
    return found


# --- code ------------------------------------------------------------------------------------


def code_citations(code: str, language: str, path: Path_) -> list[Citation]:
    found = env_citations(code, path)
    if language in PYTHON_LANGUAGES:
        tree, shift = parse_python(code)
        if tree is not None:
            found += PythonNames(code, path, 0, shift).visit_tree(tree)
    elif language in SHELL_LANGUAGES:
        for match in _PYTHON_M.finditer(code):
            module = resolve_alias(match.group(1))
            if module:
                found.append(Citation("name", module, path, match.start(1), module.split(".")[0]))
        for match in _PYTHON_C.finditer(code):
            inner = match.group(2) if match.group(2) is not None else match.group(3)
            start = match.start(2) if match.group(2) is not None else match.start(3)
            tree, shift = parse_python(inner)
            if tree is not None:
                found += PythonNames(inner, path, start, shift).visit_tree(tree)
    elif language in ("json", "yaml", "yml"):
        found += _config_file_citations(code, language, path)
    return found


# --- config files ----------------------------------------------------------------------------


def _config_file_citations(code: str, language: str, path: Path_) -> list[Citation]:
    """The keys of a DeepSpeed or accelerate config written as JSON or YAML (a fragment such as
    `"bf16": {"enabled": true}` counts as the members of an object)."""
    data = _load_config(code, language)
    if not isinstance(data, dict):
        return []
    keys = set(data)
    if keys & DEEPSPEED_MARKERS:
        library = "deepspeed"
    elif keys & ACCELERATE_MARKERS:
        library = "accelerate"
    else:
        return []
    found: list[Citation] = []
    cursor = [0]  # keys come in the order they are written: search each after the last

    def walk(mapping: dict[str, Any], prefix: str) -> None:
        for key, value in mapping.items():
            match = re.compile(r"\b" + re.escape(str(key)) + r"[\"']?\s*:").search(code, cursor[0])
            if match:
                cursor[0] = match.end()
            offset = match.start() if match else 0
            found.append(Citation("config", str(key), path, offset, library, prefix))
            if isinstance(value, dict) and key not in FREE_FORM_KEYS:
                walk(value, f"{prefix}.{key}".strip("."))

    walk(data, "")
    return found


def _load_config(code: str, language: str) -> Any:
    if language == "json":
        text = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
        for candidate in (text, "{" + text + "}"):
            try:
                return json.loads(candidate)
            except ValueError:
                continue
        return None
    try:
        return yaml.safe_load(code)
    except yaml.YAMLError:
        return None
