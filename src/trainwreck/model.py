"""The knowledge model: loading untrusted YAML documents with source positions, and entries.

Every later stage (check, reproduce, rules compile, site) reads entries and rules through this
module, so that a malformed file is reported the same way everywhere: one `Problem` with the
file, line and column of the offending node. Nothing here knows about notebooks or the site.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from trainwreck.errors import ProblemsFound

# Entries are small hand-written documents; anything far larger is a mistake or an attack.
MAX_DOCUMENT_BYTES = 1 << 20
# Aliases may expand a small file into an enormous tree (a "billion laughs"); bound the
# expanded node count instead of forbidding anchors outright.
MAX_EXPANDED_NODES = 200_000
# PyYAML composes and constructs recursively: a deeper document would exhaust the stack.
MAX_NESTING = 200
# An integer longer than this is a mistake or an attack (Python refuses above 4300 digits, and
# such a number would only reach readers as a wall of digits).
MAX_INTEGER_DIGITS = 100
# Explicit tags a hand-written document may use: plain YAML values only, never an object.
ALLOWED_TAGS = frozenset(
    {"!"}
    | {
        f"tag:yaml.org,2002:{name}"
        for name in ("str", "int", "float", "bool", "null", "seq", "map")
    }
)

SCHEMA_DIR_NAMES = ("schemas",)

Path_ = tuple[str | int, ...]


class Severity(str, Enum):
    """How bad a problem is. str-valued: compares, sorts and serialises as its value."""

    ERROR = "error"  # the file cannot be used as it is
    WARNING = "warning"  # it can, but something in it is probably wrong
    NOTE = "note"  # nothing wrong was found, but part of it could not be checked on this machine

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with one file, located as precisely as we can."""

    file: str
    line: int
    column: int
    path: str  # dotted location inside the document ("fix.primary.steps[0]"), or "" for the file
    message: str
    severity: Severity = Severity.ERROR

    def __post_init__(self) -> None:
        # Problems read back from JSON (caches, stamps) carry the value as text.
        object.__setattr__(self, "severity", Severity(self.severity))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        label = "" if self.severity == "error" else f"{self.severity}: "
        inner = f"{self.path}: " if self.path else ""
        return f"{where}: {label}{inner}{self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
            "severity": self.severity,
        }


@dataclass
class Document:
    """A parsed YAML document and where each of its nodes came from."""

    file: str
    data: Any
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    key_positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def position(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """Line and column (1-based) of the node at `path`, or of its nearest located parent."""
        table = self.key_positions if key else self.positions
        probe = tuple(path)
        while True:
            if probe in table:
                return table[probe]
            if probe in self.positions:
                return self.positions[probe]
            if not probe:
                return (1, 1)
            probe = probe[:-1]

    def problem(
        self,
        path: Path_,
        message: str,
        *,
        key: bool = False,
        severity: Severity | str = Severity.ERROR,
    ) -> Problem:
        line, column = self.position(path, key=key)
        return Problem(self.file, line, column, format_path(path), message, severity)


class DocumentError(ProblemsFound):
    """A document could not be read or parsed at all; carries the one problem that says why."""

    def __init__(self, problem: Problem):
        super().__init__(str(problem), file=problem.file, line=problem.line)
        self.problem = problem


def format_path(path: Path_) -> str:
    """("fix", "primary", "steps", 0) -> "fix.primary.steps[0]"."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class _Refused(Exception):
    """A document the loader will not compose (too deep, recursive alias, unknown tag)."""

    def __init__(self, mark: yaml.Mark, message: str):
        super().__init__(message)
        self.mark = mark
        self.message = message


class _RefusingComposer(yaml.composer.Composer):
    """A composer that refuses, before composing them, nodes nested deeper than MAX_NESTING,
    aliases to a node that encloses them (a recursive structure no later stage could walk) and
    tags outside ALLOWED_TAGS.

    Mixed in over a parser: the events come from libyaml's C parser when PyYAML has it (about
    ten times faster than the pure-Python scanner, the bulk of a no-op build's time), else from
    PyYAML's own; the checks and node positions are the same either way.
    """

    def __init__(self) -> None:
        yaml.composer.Composer.__init__(self)  # (not super(): the parser's __init__ takes a stream)
        self._depth = 0
        self._open_anchors: list[str | None] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise _Refused(
                    event.start_mark,
                    f"alias *{event.anchor} refers to a node that contains it "
                    "(a recursive structure); refusing to load",
                )
            return super().compose_node(parent, index)
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in ALLOWED_TAGS:
            raise _Refused(
                event.start_mark,
                f"unknown YAML tag '{tag}' (only plain strings, numbers, booleans, lists "
                "and mappings are allowed)",
            )
        if not isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            return super().compose_node(parent, index)
        if self._depth >= MAX_NESTING:
            raise _Refused(event.start_mark, f"document nests deeper than {MAX_NESTING} levels")
        self._depth += 1
        self._open_anchors.append(event.anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.pop()


class _PythonLoader(_RefusingComposer, yaml.SafeLoader):
    """PyYAML's own scanner and parser under the refusing composer."""

    def __init__(self, stream: Any) -> None:
        yaml.SafeLoader.__init__(self, stream)
        _RefusingComposer.__init__(self)


if yaml.__with_libyaml__:

    class _CLoader(
        _RefusingComposer,
        yaml.cyaml.CParser,
        yaml.constructor.SafeConstructor,
        yaml.resolver.Resolver,
    ):
        """libyaml's parser (its events and marks) under the refusing composer: the MRO puts
        Composer's methods before CParser's own C composer, which would skip the checks."""

        def __init__(self, stream: Any) -> None:
            yaml.cyaml.CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            _RefusingComposer.__init__(self)

    _Loader: type = _CLoader
else:
    _Loader = _PythonLoader


# Dates stay the strings the author wrote: JSON Schema has no date type, and a
# `created: 2026-11-30` must validate as a string.
_PythonLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_text(path: Path, display: str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """Read a hand-written text file defensively: size cap, binary and encoding checks."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DocumentError(
            Problem(display, 1, 1, "", f"cannot read file: {exc.strerror}")
        ) from None
    if size > max_bytes:
        raise DocumentError(
            Problem(display, 1, 1, "", f"file is {size:,} bytes; the limit is {max_bytes:,} bytes")
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DocumentError(
            Problem(display, 1, 1, "", f"cannot read file: {exc.strerror}")
        ) from None
    nul = raw.find(b"\x00")
    if nul >= 0:
        line, column = _offset_position(raw, nul)
        raise DocumentError(
            Problem(display, line, column, "", "binary file (NUL byte); expected UTF-8 YAML text")
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _offset_position(raw, exc.start)
        raise DocumentError(
            Problem(
                display,
                line,
                column,
                "",
                f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            )
        ) from None


def _offset_position(raw: bytes, offset: int) -> tuple[int, int]:
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def load_yaml(path: Path, display: str | None = None) -> Document:
    """Parse one YAML document from `path` into plain Python data with node positions.

    Raises DocumentError for anything that prevents reading the document as a whole
    (unreadable, binary, not UTF-8, syntax error, alias bomb, duplicate key).
    """
    display = display or str(path)
    text = read_text(path, display)
    return parse_yaml(text, display)


def parse_yaml(text: str, display: str) -> Document:
    """One YAML document with node positions. A document libyaml refuses is read again by
    PyYAML's own parser, so a problem reads the same with or without libyaml (the two word
    syntax errors differently); a valid document costs one fast parse."""
    if _Loader is not _PythonLoader:
        try:
            return parse_yaml_with(text, display, _Loader)
        except DocumentError:
            pass
    return parse_yaml_with(text, display, _PythonLoader)


def parse_yaml_with(text: str, display: str, loader: type) -> Document:
    try:
        nodes = list(yaml.compose_all(text, Loader=loader))
    except _Refused as exc:
        raise DocumentError(
            Problem(display, exc.mark.line + 1, exc.mark.column + 1, "", exc.message)
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = " ".join(part for part in (exc.context, exc.problem) if part)
        lines = text.splitlines()
        if line <= len(lines) and "\t" in lines[line - 1]:
            message += " (YAML is indented with spaces, not tabs)"
        raise DocumentError(
            Problem(display, line, column, "", f"YAML syntax error: {message}")
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(Problem(display, 1, 1, "", f"YAML error: {exc}")) from None
    if not nodes or nodes[0] is None:
        raise DocumentError(Problem(display, 1, 1, "", "empty document"))
    if len(nodes) > 1:
        second = nodes[1].start_mark
        raise DocumentError(
            Problem(display, second.line + 1, 1, "", "expected one YAML document, found several")
        )
    root = nodes[0]
    _check_expansion(root, display)
    document = Document(display, None)
    document.data = _to_python(root, (), document)
    return document


def _check_expansion(root: yaml.Node, display: str) -> None:
    """Refuse documents whose aliases expand beyond MAX_EXPANDED_NODES, in time linear in the
    number of distinct nodes (the expanded size is computed, never materialised)."""
    sizes: dict[int, int] = {}
    first_alias: list[yaml.Node] = []

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            if not first_alias:
                first_alias.append(node)
            return sizes[key]
        if depth > MAX_NESTING:  # through aliases: each alias was checked alone when composed
            raise DocumentError(
                Problem(
                    display,
                    node.start_mark.line + 1,
                    node.start_mark.column + 1,
                    "",
                    f"document nests deeper than {MAX_NESTING} levels",
                )
            )
        sizes[key] = 1  # guards recursive aliases
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        total = min(total, MAX_EXPANDED_NODES + 1)
        sizes[key] = total
        return total

    if size(root, 0) > MAX_EXPANDED_NODES:
        mark = (first_alias[0] if first_alias else root).start_mark
        raise DocumentError(
            Problem(
                display,
                mark.line + 1,
                mark.column + 1,
                "",
                f"YAML aliases expand to more than {MAX_EXPANDED_NODES:,} nodes; refusing to load",
            )
        )


_scalar_constructor = _Loader("")


def _to_python(node: yaml.Node, path: Path_, document: Document) -> Any:
    document.positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node, path, document)
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(child, (*path, i), document) for i, child in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key_position = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise DocumentError(
                    Problem(
                        document.file,
                        *key_position,
                        format_path(path),
                        "YAML merge keys (<<) are not supported",
                    )
                )
            key = _to_python(key_node, (*path, "<key>"), document)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise DocumentError(
                    Problem(
                        document.file,
                        *key_position,
                        format_path(path),
                        "mapping keys must be plain scalars",
                    )
                )
            key = str(key) if not isinstance(key, str) else key
            child_path = (*path, key)
            if key in result:
                first_line = document.key_positions[child_path][0]
                raise DocumentError(
                    Problem(
                        document.file,
                        *key_position,
                        format_path(child_path),
                        f"duplicate key '{key}' (first defined on line {first_line})",
                    )
                )
            document.key_positions[child_path] = key_position
            result[key] = _to_python(value_node, child_path, document)
        document.positions.pop((*path, "<key>"), None)
        return result
    raise DocumentError(Problem(document.file, 1, 1, format_path(path), "unsupported YAML node"))


def _scalar(node: yaml.ScalarNode, path: Path_, document: Document) -> Any:
    line, column = node.start_mark.line + 1, node.start_mark.column + 1
    if node.tag == "tag:yaml.org,2002:int":
        digits = sum(ch.isalnum() for ch in node.value)
        if digits > MAX_INTEGER_DIGITS:
            raise DocumentError(
                Problem(
                    document.file,
                    line,
                    column,
                    format_path(path),
                    f"integer of {digits:,} digits; the limit is {MAX_INTEGER_DIGITS} "
                    "(quote it to keep it as text)",
                )
            )
    try:
        return _scalar_constructor.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        reason = getattr(exc, "problem", None) or str(exc)
        raise DocumentError(
            Problem(document.file, line, column, format_path(path), f"unreadable value: {reason}")
        ) from None


# --- schemas -------------------------------------------------------------------------------


def schema_dir(root: Path | None = None) -> Path:
    """The JSON Schemas: the repository's own when run from a checkout, else the packaged copy."""
    if root is not None and (root / "schemas").is_dir():
        return root / "schemas"
    packaged = Path(__file__).parent / "schemas"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "schemas"


@cache
def load_schema(name: str, directory: str) -> dict[str, Any]:
    with open(Path(directory) / name, encoding="utf-8") as handle:
        return json.load(handle)


def validator_for(name: str, root: Path | None = None):
    """A jsonschema validator for `schemas/<name>`, with format checking on (for URLs)."""
    import jsonschema

    schema = load_schema(name, str(schema_dir(root)))
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_problems(
    document: Document, schema_name: str, root: Path | None = None
) -> list[Problem]:
    """Every schema violation in `document`, each at the node it concerns."""
    validator = validator_for(schema_name, root)
    problems: list[Problem] = []
    for error in validator.iter_errors(document.data):
        if error.context and not _vocabulary_values(error.schema):
            # oneOf/anyOf: the closest alternative's complaint says more than "not valid
            # under any of the given schemas".
            import jsonschema.exceptions

            # Alternatives of another type (a list where a mapping is one of the forms) say
            # only "must be a mapping"; the complaint of an alternative of the right type says
            # what is wrong.
            context = [
                e for e in error.context if e.validator != "type" or e.relative_path
            ] or error.context
            error = jsonschema.exceptions.best_match(context)
        path = tuple(error.absolute_path)
        message = _schema_message(error)
        # An unknown property is best shown at its own key, not at the enclosing mapping.
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - allowed):
                problems.append(
                    document.problem((*path, extra), f"unknown property '{extra}'", key=True)
                )
            continue
        problems.append(document.problem(path, message))
    return sorted(set(problems))


_KIND_NAMES = {
    dict: "a mapping",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "empty (null)",
}


def _vocabulary_values(schema: Any) -> list[str]:
    """The values of a controlled vocabulary (a oneOf of documented consts), else []."""
    options = schema.get("oneOf") if isinstance(schema, dict) else None
    if not options or not all(isinstance(o, dict) and "const" in o for o in options):
        return []
    return [str(o["const"]) for o in options]


def _schema_message(error: Any) -> str:
    """jsonschema's message, made shorter and more helpful where it is not."""
    values = _vocabulary_values(error.schema) if error.validator == "oneOf" else []
    if values:
        facet = str(error.schema.get("title", "value")).lower()
        return f"{error.instance!r} is not a known {facet}; use one of: {', '.join(values)}"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        got = _KIND_NAMES.get(type(error.instance), type(error.instance).__name__)
        hint = ""
        if isinstance(error.instance, bool) and "string" in str(expected):
            hint = " (YAML reads yes/no/on/off/true/false as booleans: quote the text)"
        return f"must be {'an' if expected[0] in 'aeiou' else 'a'} {expected}, not {got}{hint}"
    if error.validator == "pattern" and "description" in error.schema:
        first = error.schema["description"].split(". ")[0].split("; ")[0].rstrip(".")
        return f"{error.message} ({first})"
    if error.validator == "minLength" and error.validator_value == 1:
        return "must not be empty"
    return error.message


# --- entries ---------------------------------------------------------------------------------


@dataclass
class Entry:
    """One failure in the encyclopedia, as loaded from entries/<id>.yaml."""

    id: str
    path: Path
    data: dict[str, Any]
    document: Document

    @property
    def title(self) -> str:
        return str(self.data.get("title", self.id))

    @property
    def reproduction(self) -> dict[str, Any]:
        """The first reproduction's block as written ({} when there is none): the one block of
        the single form. Code that must see every reproduction reads `reproductions`."""
        found = self.reproductions
        return dict(found[0].data) if found else {}

    @property
    def reproductions(self) -> list[Reproduction]:
        """Every reproduction of the entry: one for the single-object form, one per list item
        (items that are not mappings are the schema's to report, and left out)."""
        block = self.data.get("reproduction")
        if isinstance(block, dict):
            return [Reproduction(self.id, self.id, block, ("reproduction",), single=True)]
        if not isinstance(block, list):
            return []
        return [
            Reproduction(reproduction_id(self.id, item), self.id, item, ("reproduction", i))
            for i, item in enumerate(block)
            if isinstance(item, dict)
        ]

    @property
    def related(self) -> list[dict[str, Any]]:
        return list(self.data.get("related") or [])


@dataclass(frozen=True)
class Reproduction:
    """One reproduction of an entry: a notebook on cpu or gpu, or the reason there is none.

    `id` names its run everywhere a run is kept (build/manifest.json, build/cache, build/executed,
    build/evidence, recordings/): the entry's id for the single-object form, so that form's runs
    and recordings keep their names; the notebook's file stem for an item of the list form."""

    id: str
    entry: str
    data: dict[str, Any]  # the block as written: part of its notebook's source hash
    path: tuple[str | int, ...]  # where the block is in the entry, for problems
    single: bool = False  # the single-object form

    @property
    def notebook(self) -> str | None:
        value = self.data.get("notebook")
        return value if isinstance(value, str) and value else None

    @property
    def device(self) -> str:
        value = self.data.get("device")
        return str(value) if value in ("cpu", "gpu") else "cpu"

    @property
    def note(self) -> str | None:
        value = self.data.get("note")
        return value if isinstance(value, str) and value.strip() else None

    @property
    def not_reproducible(self) -> str | None:
        value = self.data.get("not_reproducible")
        return None if value is None else str(value)

    @property
    def replay(self) -> str | None:
        """What the notebook replays a model of instead of running the failure ("allocator":
        trainwreck.memory's model of the CUDA caching allocator's rules), or None."""
        value = self.data.get("replay")
        return value if isinstance(value, str) and value else None


_RUN_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def reproduction_id(entry_id: str, item: dict[str, Any]) -> str:
    """The run id of one item of an entry's reproduction list: its notebook's file stem (a
    not_reproducible item, or one without a usable notebook, takes the entry's id)."""
    notebook = item.get("notebook")
    if isinstance(notebook, str) and notebook.endswith(".ipynb"):
        stem = notebook.rsplit("/", 1)[-1].removesuffix(".ipynb")
        # The id names files under build/ and recordings/: kebab-case only (the schema's
        # pattern), never '..' or a name from an unchecked entry.
        if _RUN_ID.fullmatch(stem):
            return stem
    return entry_id


def entry_files(root: Path) -> list[Path]:
    return sorted((root / "entries").glob("*.yaml"))


def load_entry(path: Path, root: Path) -> Entry:
    """Parse one entry (raises DocumentError if it cannot be parsed at all)."""
    document = load_yaml(path, display_path(path, root))
    data = document.data if isinstance(document.data, dict) else {}
    return Entry(id=path.stem, path=path, data=data, document=document)


def load_entries(root: Path) -> tuple[list[Entry], list[Problem]]:
    """All entries that parse, plus a problem for each that does not. No schema validation:
    that is `trainwreck check`'s job; later stages call check first."""
    entries: list[Entry] = []
    problems: list[Problem] = []
    for path in entry_files(root):
        try:
            entries.append(load_entry(path, root))
        except DocumentError as exc:
            problems.append(exc.problem)
    return entries, problems


def display_path(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
