"""The base side of a review: the tree at a git ref, unpacked from `git archive` into a temporary
folder (the working tree, its index and its worktrees are never touched)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from trainwreck.errors import CommandUsageError


class ReviewError(CommandUsageError):
    """Bad input (not a git checkout, unknown ref): reported as one line, exit 2."""


def _git(root: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, check=False, timeout=300
        )
    except FileNotFoundError:
        raise ReviewError("git is not installed") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ReviewError(message[-1] if message else f"git {args[0]} failed")
    return done.stdout


def resolve_ref(root: Path, ref: str) -> str:
    """The commit REF names, or ReviewError."""
    if ref.startswith("-"):
        raise ReviewError(f"'{ref}' is not a git ref")
    # A clone made for CI or from a fork often has origin/main but no local main.
    for candidate in (ref, f"origin/{ref}") if "/" not in ref else (ref,):
        try:
            return (
                _git(root, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
                .decode()
                .strip()
            )
        except ReviewError:
            continue
    raise ReviewError(f"'{ref}' names no commit in {root}")


# What a review reads from the base: everything else in the repository is left out of the archive.
KNOWLEDGE_BASE = (
    "entries",
    "rules",
    "notebooks",
    "tests",
    "recordings",
    "docs",
    "schemas",
    "mkdocs.yml",
)


def _safe(member: tarfile.TarInfo) -> bool:
    """Regular files and folders inside the target only: a committed symlink or a name with
    '..' must not write outside the temporary folder."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith("/") or ".." in parts:
        return False
    return member.isfile() or member.isdir()


@contextmanager
def base_tree(root: Path, commit: str) -> Iterator[Path]:
    """The knowledge base at `commit`, unpacked into a temporary folder for the duration
    (streamed from `git archive`, so a large repository is never held in memory)."""
    # --root may be a folder inside the repository: read the same folder at the base.
    # (git ls-tree and git archive run from the top level: in a subfolder they filter by it.)
    prefix = _git(root, "rev-parse", "--show-prefix").decode("utf-8", "replace").strip()
    top = Path(_git(root, "rev-parse", "--show-toplevel").decode("utf-8", "replace").strip())
    tree = f"{commit}:{prefix.rstrip('/')}" if prefix else commit
    listing = _git(top, "ls-tree", "--name-only", tree).decode("utf-8", "replace")
    present = set(listing.split("\n"))
    wanted = [name for name in KNOWLEDGE_BASE if name in present]
    folder = Path(tempfile.mkdtemp(prefix="trainwreck-review-"))
    try:
        if wanted:
            _extract(top, tree, wanted, folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _extract(root: Path, tree: str, paths: list[str], folder: Path) -> None:
    command = ["git", "-C", str(root), "archive", "--format=tar", tree, "--", *paths]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        try:
            with tarfile.open(fileobj=process.stdout, mode="r|") as archive:
                for member in archive:
                    if not _safe(member):
                        continue
                    if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                        archive.extract(member, folder, filter="data")
                    else:
                        archive.extract(member, folder)
            # tarfile stops at the end-of-archive blocks while git may still be writing the
            # record's padding: closing the pipe then kills git with SIGPIPE (no message).
            while process.stdout.read(65536):
                pass
        except tarfile.TarError as exc:
            raise ReviewError(f"cannot read git archive of {tree[:12]}: {exc}") from None
        finally:
            process.stdout.close()
            error = process.stderr.read().decode("utf-8", "replace") if process.stderr else ""
            process.wait()
    if process.returncode != 0:
        lines = error.strip().splitlines()
        raise ReviewError(lines[-1] if lines else "git archive failed")
