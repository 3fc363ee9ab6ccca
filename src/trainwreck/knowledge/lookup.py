"""Look names up in one installed library: run as a script, in its own process.

    python lookup.py RESULT.json < REQUEST.json

REQUEST is {"root": "torch", "names": ["torch.cuda.memory._snapshot", ...], "callees": [...]}.
RESULT gets {"names": {name: [status, reason]}, "callees": {callee: params or null}}, where status
is "ok", "missing" (the library has no such attribute or module) or "unknown" (it could not be
looked up: a submodule failed to import); params are the keyword names a callable accepts, or null
when it accepts any (`**kwargs`) or has no signature to read.

`trainwreck check` runs this with the interpreter it runs under, one process per library, so that
the check itself never imports torch, transformers or deepspeed. It imports nothing of trainwreck.
The result goes to a file, not stdout, because libraries print while they import.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import sys
import types
import warnings
from typing import Any


def look_up(dotted: str) -> tuple[str, str, Any]:
    """(status, reason, object) for a dotted name, importing submodules as needed."""
    parts = dotted.split(".")
    try:
        obj: Any = importlib.import_module(parts[0])
    except Exception as exc:  # the caller reports the library as not importable
        return "unknown", f"import {parts[0]} failed: {type(exc).__name__}: {exc}", None
    path = parts[0]
    for part in parts[1:]:
        child = f"{path}.{part}"
        try:
            obj = getattr(obj, part)
            path = child
            continue
        except Exception:
            pass
        if isinstance(obj, types.ModuleType):
            try:
                obj = importlib.import_module(child)
                path = child
                continue
            except ModuleNotFoundError as exc:
                if exc.name and child.startswith(exc.name):
                    return "missing", f"{path} has no attribute or submodule '{part}'", None
                return "unknown", f"import {child} failed: {exc}", None
            except Exception as exc:
                return "unknown", f"import {child} failed: {type(exc).__name__}: {exc}", None
        if inspect.isclass(obj) and part in _declared_fields(obj):
            return "ok", "", None  # a field without a class-level default: nothing further to see
        return "missing", f"{path} has no attribute '{part}'", None
    return "ok", "", obj


def _declared_fields(cls: type) -> set[str]:
    """Fields a class declares without exposing them as class attributes: dataclass fields,
    pydantic model fields and annotated attributes, along the MRO."""
    names: set[str] = set()
    if dataclasses.is_dataclass(cls):
        names |= {field.name for field in dataclasses.fields(cls)}
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, dict):
        names |= set(model_fields)
    for klass in inspect.getmro(cls):
        names |= set(getattr(klass, "__annotations__", {}) or {})
    return names


def keyword_names(obj: Any) -> list[str] | None:
    """The keyword arguments `obj(...)` accepts, or None when it takes any or cannot be read."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]


def main() -> None:
    request = json.load(sys.stdin)
    warnings.simplefilter("ignore")
    result: dict[str, Any] = {"names": {}, "callees": {}}
    for name in request.get("names", []):
        status, reason, _ = look_up(name)
        result["names"][name] = [status, reason]
    for callee in request.get("callees", []):
        status, _, obj = look_up(callee)
        result["callees"][callee] = keyword_names(obj) if status == "ok" and obj else None
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
