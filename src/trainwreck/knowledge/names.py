"""Names checked against the installed libraries: `check`'s problems for what entries and rules cite.

Every citation (`knowledge.citations`) is judged against the library it belongs to:

- a dotted Python name must exist (an attribute or a submodule), a keyword argument must be one
  the callable accepts (unless it takes `**kwargs`);
- an environment variable must be read or named by the library its prefix belongs to (found in its
  installed files), or listed for NCCL and CUDA in `known_env.yaml`;
- a config key must be one DeepSpeed's or accelerate's config readers know, an allocator option
  one torch's allocator config parser knows.

An unknown name is an error when its library is installed, and a warning naming the library when it
is not (or fails to import). A name the entry says was removed or renamed is listed under
`names.removed` in the entry and is not an error (docs/contributing.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.knowledge import libraries
from trainwreck.knowledge.citations import Citation, document_citations
from trainwreck.model import Document, Problem, format_path

# Prefix -> the libraries whose installed files are searched, and the known_env.yaml lists.
ENV_SOURCES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("TORCHELASTIC_", ("torch",), ()),
    ("TORCHINDUCTOR_", ("torch",), ()),
    ("TORCHDYNAMO_", ("torch",), ()),
    ("TORCH_", ("torch",), ()),
    ("PYTORCH_", ("torch",), ("torch_macos",)),  # MPS variables exist only in macOS builds
    ("NCCL_", ("torch",), ("nccl",)),
    ("CUDA_", ("torch",), ("cuda",)),
    ("CUBLASLT_", ("torch",), ()),
    ("CUBLAS_", ("torch",), ()),
    ("CUDNN_", ("torch",), ()),
    ("OMP_", ("torch",), ()),  # torch ships its OpenMP runtime (torch/lib/libgomp)
    ("HF_DATASETS_", ("datasets",), ()),
    ("HF_HUB_", ("huggingface_hub",), ()),
    ("HF_", ("huggingface_hub", "transformers", "accelerate"), ()),
    ("HUGGINGFACE_", ("huggingface_hub", "transformers"), ()),
    ("TRANSFORMERS_", ("transformers",), ()),
    ("ACCELERATE_", ("accelerate",), ()),
    ("TOKENIZERS_", ("tokenizers",), ()),
    ("DS_", ("deepspeed",), ()),
    ("TRITON_", ("triton",), ()),
    ("BNB_", ("bitsandbytes",), ()),
)
CONFIG_LABELS = {"deepspeed": "DeepSpeed", "accelerate": "accelerate"}


@dataclass
class Cited:
    """The citations of one document, with what is needed to place and excuse them."""

    document: Document
    lines: list[str]
    citations: list[Citation]
    removed: set[str]


def documents(entries: Iterable[Any], rule_links: Iterable[Any], root: Path) -> list[Cited]:
    """The entries checked and the rules that diagnose them."""
    cited = []
    for entry in entries:
        cited.append(
            Cited(
                entry.document,
                _lines(entry.path),
                document_citations(entry.data),
                removed_names(entry.data),
            )
        )
    for link in rule_links:
        document = link.document
        data = document.data if isinstance(document.data, dict) else {}
        cited.append(
            Cited(
                document, _lines(root / document.file), document_citations(data, rule=True), set()
            )
        )
    return cited


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def removed_names(data: Any) -> set[str]:
    names = data.get("names") if isinstance(data, dict) else None
    removed = names.get("removed") if isinstance(names, dict) else None
    return {
        str(item["name"])
        for item in removed or []
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    }


def name_problems(cited: Sequence[Cited], root: Path) -> list[Problem]:
    """Every cited name the installed libraries do not have (see the module docstring)."""
    cache = libraries.cache_for(root)
    requests: dict[str, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for doc in cited:
        for c in doc.citations:
            if c.kind == "name":
                requests[c.library][0].add(c.name)
            elif c.kind == "keyword":
                requests[c.library][1].add(c.callee)
    with libraries.Lookups(dict(requests), cache) as lookups:
        # while the libraries answer, read what needs no answer from them: scanning their
        # files for environment variables and config keys (filled into the caches)
        prepare = _Judge({}, cache)
        for doc in cited:
            for c in doc.citations:
                if c.kind not in ("name", "keyword"):
                    prepare.verdict(c)
        judge = _Judge(lookups.answers(), cache)
    problems: list[Problem] = []
    for doc in cited:
        problems += judge.document(doc)
    return problems


class _Judge:
    def __init__(self, answers: dict[str, libraries.Answer], cache: Path) -> None:
        self.answers = answers
        self.cache = cache

    def document(self, doc: Cited) -> list[Problem]:
        problems: list[Problem] = []
        unchecked: dict[str, list[Citation]] = defaultdict(list)  # reason -> citations
        used_removed: set[str] = set()
        for c in doc.citations:
            verdict = self.verdict(c)
            if verdict is None:
                continue
            severity, message = verdict
            if {c.name, f"{c.callee}.{c.name}"} & doc.removed:
                used_removed |= {c.name, f"{c.callee}.{c.name}"}
                continue
            if severity == "unchecked":
                unchecked[message].append(c)
                continue
            problems.append(_problem(doc, c, message, severity))
        for reason, citations in unchecked.items():
            names = sorted({f"{c.callee}({c.name}=)" if c.callee else c.name for c in citations})
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            message = f"{reason}: {len(names)} name(s) not checked ({shown})"
            problems.append(_problem(doc, citations[0], message, "note"))
        problems += _unused_removed(doc, used_removed)
        return problems

    def verdict(self, c: Citation) -> tuple[str, str] | None:
        """None when the citation holds, else (severity, message); severity "unchecked" means
        it could not be checked (collected into one warning per reason)."""
        if c.kind in ("name", "keyword"):
            return self._python(c)
        if c.kind == "env":
            return self._env(c)
        if c.kind == "alloc":
            torch = libraries.library("torch")
            if torch.version is None:
                return "unchecked", "torch is not installed (allocator options)"
            options = libraries.allocator_options(torch, self.cache)
            if not options:
                return "unchecked", f"{torch.label} does not show its allocator options"
            if c.name in options:
                return None
            return "error", f"'{c.name}' is not an allocator option {torch.label} parses"
        if c.kind == "config":
            lib = libraries.library(c.library)
            label = CONFIG_LABELS.get(c.library, c.library)
            if lib.version is None:
                return "unchecked", f"{c.library} is not installed ({label} config keys)"
            read = (
                libraries.deepspeed_config_keys
                if c.library == "deepspeed"
                else libraries.accelerate_config_keys
            )
            if c.name in read(lib, self.cache):
                return None
            where = f" (in {c.callee})" if c.callee else ""
            return "error", f"'{c.name}'{where} is not a {label} config key in {lib.label}"
        return None

    def _python(self, c: Citation) -> tuple[str, str] | None:
        answer = self.answers.get(c.library)
        lib = answer.library if answer else libraries.library(c.library)
        if lib.version is None:
            return "unchecked", f"{c.library} is not installed"
        if answer is None or answer.failure:
            return "unchecked", answer.failure if answer else f"{c.library} was not asked"
        if c.kind == "name":
            status, reason = (answer.names.get(c.name) or ["unknown", "not looked up"])[:2]
            if status == "ok":
                return None
            if status == "missing":
                return "error", f"{c.name} does not exist in {lib.label} ({reason})"
            return "unchecked", f"could not look up names in {lib.label} ({reason[:120]})"
        status = (answer.names.get(c.callee) or ["ok"])[0]
        if status != "ok":
            return None  # the callee itself is reported as a name
        params = answer.callees.get(c.callee)
        if params is None or c.name in params:
            return None
        return (
            "error",
            f"{c.callee}() has no keyword argument '{c.name}' in {lib.label}",
        )

    def _env(self, c: Citation) -> tuple[str, str] | None:
        source = next((s for s in ENV_SOURCES if c.name.startswith(s[0])), None)
        not_variables = libraries.known_env().get("not_variables") or {}
        if source is None or any(c.name.startswith(prefix) for prefix in not_variables):
            return None
        _, roots, lists = source
        looked: list[str] = []
        missing: list[str] = []
        for name in lists:
            known = libraries.known_env().get(name) or {}
            variables = known.get("variables") or {}
            if c.name in variables:
                return None
            looked.append(
                f"{known.get('library', name)} ({known.get('tags', '?')}; known_env.yaml)"
            )
        for root in roots:
            lib = libraries.library(root)
            if lib.version is None:
                missing.append(root)
                continue
            if c.name in libraries.env_tokens(lib, _prefixes_of(root), self.cache):
                return None
            looked.append(f"{lib.label}'s files")
        if missing:
            return "unchecked", f"{' and '.join(missing)} not installed (environment variables)"
        return (
            "error",
            f"environment variable {c.name} is unknown: not read by {' or '.join(looked)}",
        )


def _prefixes_of(root: str) -> list[str]:
    """The prefixes whose variables are searched in `root`'s files (one scan serves them all)."""
    return [prefix for prefix, roots, _ in ENV_SOURCES if root in roots]


def _problem(doc: Cited, c: Citation, message: str, severity: str) -> Problem:
    line, column = doc.document.position(c.path)
    line, column = offset_position(doc.lines, line, column, c.offset)
    return Problem(doc.document.file, line, column, format_path(c.path), message, severity)


def _unused_removed(doc: Cited, used: set[str]) -> list[Problem]:
    data = doc.document.data if isinstance(doc.document.data, dict) else {}
    names = data.get("names") if isinstance(data.get("names"), dict) else {}
    problems = []
    for index, item in enumerate(names.get("removed") or []):
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name not in used:
            problems.append(
                doc.document.problem(
                    ("names", "removed", index, "name"),
                    f"'{name}' is listed as removed but no code here cites it as missing "
                    "(drop it, or it exists in the installed version)",
                    severity="warning",
                )
            )
    return problems


def offset_position(lines: list[str], line: int, column: int, offset: int) -> tuple[int, int]:
    """Line and column of character `offset` of the value of the scalar that starts at
    (line, column): plain and quoted flow scalars fold line breaks into one character (quotes
    and escapes take more source than value), block scalars keep their lines."""
    if not 1 <= line <= len(lines) or offset <= 0:
        return line, column
    text = lines[line - 1]
    first = text[column - 1 : column]
    if first in ("|", ">"):
        return _block_position(lines, line, column, offset)
    quote = first if first in ("'", '"') else ""
    position = 0
    number, index = line, column - 1 + (1 if quote else 0)
    while number <= len(lines):
        source = lines[number - 1]
        while index < len(source):
            char = source[index]
            width = 1
            if quote and char == quote:
                if quote == "'" and source[index + 1 : index + 2] == "'":
                    width = 2
                else:
                    return number, index + 1
            elif quote == '"' and char == "\\":
                if index + 1 >= len(source):
                    break  # an escaped line break: no character in the value
                width = {"x": 4, "u": 6, "U": 10}.get(source[index + 1], 2)
            if position == offset:
                return number, index + 1
            position += 1
            index += width
        if position == offset:
            return number, len(source.rstrip()) + 1
        position += 1  # the folded line break
        number += 1
        if number <= len(lines):
            following = lines[number - 1]
            index = len(following) - len(following.lstrip())
    return line, column


def _block_position(lines: list[str], line: int, column: int, offset: int) -> tuple[int, int]:
    indent = None
    position = 0
    for number in range(line + 1, len(lines) + 1):
        source = lines[number - 1]
        if not source.strip():
            position += 1
            continue
        here = len(source) - len(source.lstrip())
        if indent is None:
            indent = here
        if here < indent:
            break
        body = source[indent:]
        if offset <= position + len(body):
            return number, indent + 1 + (offset - position)
        position += len(body) + 1
    return line, column
