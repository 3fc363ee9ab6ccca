"""What a piece of Python cites from the libraries: names, keyword arguments, DeepSpeed keys.

`PythonNames` walks the tree of one snippet (a code example, a fix step, an inline code span):
imports bind local names to library names, and an attribute chain rooted at one of them (or at a
conventional short name the snippet leaves unbound, `np`, `dist`, `F`) is a dotted name the library
must have; the keyword arguments of a call to it must be ones it accepts; a dict literal that is a
DeepSpeed config has keys DeepSpeed must know. The result is a list of `Citation`s, each at the
character offset of its node inside the scalar that holds the code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from trainwreck.model import Path_

# Top-level packages whose names are checked; anything else in code is the reader's own.
LIBRARY_ROOTS = frozenset(
    {
        "accelerate",
        "apex",
        "bitsandbytes",
        "datasets",
        "deepspeed",
        "flash_attn",
        "huggingface_hub",
        "lightning",
        "megatron",
        "numpy",
        "peft",
        "pytorch_lightning",
        "safetensors",
        "tokenizers",
        "torch",
        "trainwreck",  # the probe API that entries show
        "torchdata",
        "torchtitan",
        "torchvision",
        "transformers",
        "triton",
        "trl",
        "vllm",
    }
)
# Conventional short names, used only where the snippet does not bind the name itself.
CONVENTIONAL_ALIASES = {
    "np": "numpy",
    "dist": "torch.distributed",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "pl": "lightning.pytorch",
    "L": "lightning",
}

# Sections whose keys are another API's arguments (an optimizer's, a scheduler's), not config keys.
FREE_FORM_KEYS = frozenset({"params"})
_DS_CONFIG_NAME = re.compile(r"(?:^|_)(?:ds|deepspeed)_?config$")


@dataclass(frozen=True)
class Citation:
    """One name a document cites, at one place."""

    kind: str  # name | keyword | env | alloc | config
    name: str
    path: Path_
    offset: int  # character offset inside the scalar at `path`
    library: str = ""  # name, keyword: the top-level package; config: deepspeed | accelerate
    callee: str = ""  # keyword: the dotted callable; config: the enclosing key path


def resolve_alias(dotted: str) -> str | None:
    """A dotted name in terms of a library's own package, or None when it is not a library's."""
    head, _, rest = dotted.partition(".")
    if head in LIBRARY_ROOTS:
        return dotted
    target = CONVENTIONAL_ALIASES.get(head)
    if target:
        return f"{target}.{rest}" if rest else target
    return None


# A fragment is compiled as the body of a loop in a coroutine, so that `break`, `continue`,
# `return` and `await` are allowed: the wrapper adds FRAGMENT_LINES lines and indents by two.
FRAGMENT_LINES = 2


def as_fragment(code: str) -> str:
    body = "".join("  " + line if line.strip() else line for line in code.splitlines(True))
    return "async def _fragment():\n for _ in ():\n" + body


def parse_python(code: str) -> tuple[ast.AST | None, int]:
    """The module's tree, or that of the code as a fragment; with the number of lines the
    fragment's wrapper added (0 for a module)."""
    try:
        return ast.parse(code), 0
    except (SyntaxError, ValueError):
        pass
    try:
        return ast.parse(as_fragment(code)), FRAGMENT_LINES
    except (SyntaxError, ValueError):
        return None, 0


class PythonNames:
    """The library names one piece of Python cites: imports, attribute chains rooted at an
    imported (or conventionally named) module, the keyword arguments of calls to them, and the
    keys of DeepSpeed config dicts."""

    def __init__(self, code: str, path: Path_, base: int, wrapped_lines: int = 0) -> None:
        self.path = path
        self.base = base
        self.wrapped = wrapped_lines
        self.lines = code.splitlines(True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.bound: dict[str, str] = {}  # local name -> dotted library name
        self.assigned: set[str] = set()  # names the code binds to something else
        self.found: list[Citation] = []

    # positions

    def offset(self, node: ast.AST) -> int:
        line = getattr(node, "lineno", 1) - 1 - self.wrapped
        col = getattr(node, "col_offset", 0)
        if self.wrapped and line >= 0:
            col -= 2
        if not 0 <= line < len(self.lines):
            return self.base
        text = self.lines[line]
        chars = len(text.encode("utf-8")[: max(col, 0)].decode("utf-8", errors="ignore"))
        return self.base + self.starts[line] + chars

    def cite(self, kind: str, name: str, node: ast.AST, library: str, callee: str = "") -> None:
        self.found.append(Citation(kind, name, self.path, self.offset(node), library, callee))

    # the walk

    def visit_tree(self, tree: ast.AST) -> list[Citation]:
        self._collect_bindings(tree)
        self._visit(tree, parent_is_attribute=False)
        return self.found

    def _collect_bindings(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.split(".")[0]
                    if root not in LIBRARY_ROOTS:
                        self.assigned.add(alias.asname or root)
                        continue
                    self.cite("name", alias.name, alias, root)
                    if alias.asname:
                        self.bound[alias.asname] = alias.name
                    else:
                        self.bound[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                root = node.module.split(".")[0]
                for alias in node.names:
                    local = alias.asname or alias.name
                    if root not in LIBRARY_ROOTS or alias.name == "*":
                        self.assigned.add(local)
                        continue
                    dotted = f"{node.module}.{alias.name}"
                    self.cite("name", dotted, alias, root)
                    self.bound[local] = dotted
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.assigned.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.assigned.add(node.name)
            elif isinstance(node, ast.arg):
                self.assigned.add(node.arg)
        for name in self.bound:
            self.assigned.discard(name)

    def dotted(self, node: ast.AST) -> str | None:
        """The library name an expression `a.b.c` stands for, or None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = node.id
        if head in self.bound:
            base = self.bound[head]
        elif head in self.assigned:
            return None
        else:
            base = resolve_alias(head) or ""
            if not base:
                return None
        return ".".join([base, *reversed(parts)])

    def _visit(self, node: ast.AST, parent_is_attribute: bool) -> None:
        if isinstance(node, ast.Attribute) and not parent_is_attribute:
            dotted = self.dotted(node)
            if dotted:
                self.cite("name", dotted, node, dotted.split(".")[0])
        if isinstance(node, ast.Call):
            callee = self.dotted(node.func)
            if callee:
                for keyword in node.keywords:
                    if keyword.arg:
                        self.cite("keyword", keyword.arg, keyword, callee.split(".")[0], callee)
            self._ds_call_config(node, callee)
        if isinstance(node, ast.Assign):
            self._ds_assigned_config(node)
        for child in ast.iter_child_nodes(node):
            self._visit(child, isinstance(node, ast.Attribute) and child is node.value)

    # DeepSpeed configs written as Python dicts

    def _ds_call_config(self, node: ast.Call, callee: str | None) -> None:
        if callee and callee.startswith("deepspeed.") and callee.endswith("initialize"):
            for keyword in node.keywords:
                if keyword.arg in ("config", "config_params") and isinstance(
                    keyword.value, ast.Dict
                ):
                    self._dict_keys(keyword.value, "")

    def _ds_assigned_config(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                if _DS_CONFIG_NAME.search(target.id) or _is_deepspeed(_literal_keys(node.value)):
                    self._dict_keys(node.value, "")
            elif (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and _DS_CONFIG_NAME.search(target.value.id)
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
            ):
                self.cite("config", target.slice.value, target.slice, "deepspeed", "")
                if isinstance(node.value, ast.Dict):
                    self._dict_keys(node.value, target.slice.value)

    def _dict_keys(self, node: ast.Dict, prefix: str) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            self.cite("config", key.value, key, "deepspeed", prefix)
            if isinstance(value, ast.Dict) and key.value not in FREE_FORM_KEYS:
                self._dict_keys(value, f"{prefix}.{key.value}".strip("."))


def _literal_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _is_deepspeed(keys: set[str]) -> bool:
    # Python dicts are everywhere: only the keys no other config has make one DeepSpeed's
    # (JSON and YAML code uses the wider DEEPSPEED_MARKERS of citations.py)
    return bool(keys & {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"})
