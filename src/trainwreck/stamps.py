"""Skipping work whose inputs did not change: content keys and stamps.

A stage of `trainwreck build` or `trainwreck compile` is skipped when a key over the content of
everything it reads (and over the toolkit's own source, so a new toolkit redoes the work) equals
the key its last successful run stored in `build/stamps/<stage>.json` (or under
$TRAINWRECK_CACHE_DIR, see `cache_dir`), and the outputs that run
recorded are still there, byte for byte. Keys are over content, never modification times: a
checkout or `touch` that leaves the bytes alone costs nothing, any changed byte redoes the stage.

A stamp is written only after the stage succeeded, atomically; an unreadable, foreign or damaged
stamp is simply a miss. A read-only checkout still builds, it only cannot skip.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainwreck import __version__

STAMP_FORMAT = 1
_ENV_TAG = re.compile(r"!ENV\s*(?:\[([^\]]*)\]|([A-Za-z_]\w*))")
_ENV_NAME = re.compile(r"(?<![\w'\"])([A-Za-z_]\w*)(?![\w'\"])")
_PACKAGE = Path(__file__).resolve().parent


class Key:
    """A running SHA-256 over named parts: text, files (by path and content), folders."""

    def __init__(self, stage: str) -> None:
        self._digest = hashlib.sha256(f"trainwreck {__version__}\0{stage}\0".encode())

    def text(self, *parts: Any) -> Key:
        for part in parts:
            self._digest.update(b"T" + json.dumps(part, sort_keys=True, default=str).encode())
            self._digest.update(b"\0")
        return self

    def file(self, path: Path, name: str | None = None) -> Key:
        """A file's name and content; a missing or unreadable file counts as such."""
        self._digest.update(b"F" + (name or str(path.resolve())).encode() + b"\0")
        try:
            data = path.read_bytes()
        except OSError:
            self._digest.update(b"<missing>\0")
            return self
        self._digest.update(str(len(data)).encode() + b"\0" + data)
        return self

    def tree(self, folder: Path, pattern: str = "**/*") -> Key:
        """Every file under `folder` matching `pattern`, by relative path and content."""
        self._digest.update(b"D" + str(folder.resolve()).encode() + b"\0")
        if not folder.is_dir():
            self._digest.update(b"<no folder>\0")
            return self
        for path in sorted(p for p in folder.glob(pattern) if p.is_file()):
            self.file(path, path.relative_to(folder).as_posix())
        return self

    def environment(self, config: Path) -> Key:
        """The values of the environment variables a YAML file reads with `!ENV` (mkdocs.yml's
        site_url comes from TRAINWRECK_SITE_URL): the same file builds differently with another
        value."""
        try:
            text = config.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        names: list[str] = []
        for found in _ENV_TAG.finditer(text):
            names += _ENV_NAME.findall(found.group(1) or found.group(2) or "")
        return self.text({name: os.environ.get(name) for name in sorted(set(names))})

    def code(self) -> Key:
        """The toolkit's source: a changed renderer or compiler redoes what it made."""
        return self.tree(_PACKAGE, "**/*.py")

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def file_digest(path: Path) -> str | None:
    """SHA-256 of a file, or of a folder's files (by relative path); None when absent."""
    if path.is_dir():
        return Key("folder").tree(path).hexdigest()
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def digests(paths: Iterable[Path]) -> dict[str, str | None]:
    return {str(path): file_digest(path) for path in paths}


def unchanged(recorded: Any) -> bool:
    """Whether every file recorded as {path: digest} still has that digest (and exists)."""
    if not isinstance(recorded, dict):
        return False
    return all(
        isinstance(digest, str) and file_digest(Path(path)) == digest
        for path, digest in recorded.items()
    )


# Where the toolkit keeps its own bookkeeping (stamps, the rules cache) instead of ROOT/build/:
# a folder outside the checkout, one subfolder per checkout. The test suite sets it so that no
# test writes into the repository's build/; a read-only checkout can set it to skip work again.
CACHE_DIR_VARIABLE = "TRAINWRECK_CACHE_DIR"


def cache_dir(root: Path) -> Path:
    """ROOT/build, or the checkout's own folder under $TRAINWRECK_CACHE_DIR when it is set."""
    base = os.environ.get(CACHE_DIR_VARIABLE)
    if not base:
        return root / "build"
    digest = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:16]
    return Path(base) / digest


def shared_cache_dir(root: Path) -> Path:
    """ROOT/build, or $TRAINWRECK_CACHE_DIR/shared when it is set: for what depends on the
    installed libraries rather than on the checkout (`check`'s name lookups), so every checkout
    using the same environment shares it."""
    base = os.environ.get(CACHE_DIR_VARIABLE)
    return Path(base) / "shared" if base else root / "build"


def stamp_path(root: Path, stage: str) -> Path:
    return cache_dir(root) / "stamps" / f"{stage}.json"


def load(root: Path, stage: str, key: str) -> dict[str, Any] | None:
    """The stamp of `stage` when it was made for `key`, else None."""
    try:
        data = json.loads(stamp_path(root, stage).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != STAMP_FORMAT or data.get("key") != key:
        return None
    return data


def save(root: Path, stage: str, key: str, data: dict[str, Any]) -> None:
    path = stamp_path(root, stage)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"format": STAMP_FORMAT, "key": key, **data}, sort_keys=True),
            encoding="utf-8",
        )
        tmp.replace(path)
    except OSError:
        pass  # a read-only checkout builds, it only cannot skip next time


def forget(root: Path, stage: str) -> None:
    """Drop a stage's stamp (its outputs are about to change)."""
    with contextlib.suppress(OSError):
        stamp_path(root, stage).unlink(missing_ok=True)
