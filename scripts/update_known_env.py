"""Regenerate the NCCL part of src/trainwreck/knowledge/known_env.yaml from the NCCL repository.

    python scripts/update_known_env.py /path/to/nccl.git > /tmp/nccl.yaml

NCCL is a C library: the installed wheel (nvidia-nccl-cu12) holds only a shared library, so
`trainwreck check` cannot tell which NCCL_* variables exist from the installed files alone. This
script reads every release tag (v2.*) of https://github.com/NVIDIA/nccl with `git grep` and lists,
for each variable, the first and the last tag whose src/ reads or names it:

- NCCL_PARAM(Name, "SUFFIX", default)          (the parameter macro: reads NCCL_SUFFIX)
- DEFINE_NCCL_PARAM(var, type, NCCL_X, ...)     (the parameter registry of 2.30)
- a string literal "NCCL_X"                     (ncclGetEnv("NCCL_X"), getenv, ncclGetLevel, messages)

Its output is the `nccl:` block of known_env.yaml, pasted in place of the old one.
"""

from __future__ import annotations

import re
import subprocess
import sys

PATTERNS = (
    re.compile(r'NCCL_PARAM\(\s*\w+\s*,\s*"([A-Z0-9_]+)"'),
    re.compile(r"DEFINE_NCCL_PARAM\(\s*\w+\s*,\s*[^,]+,\s*(NCCL_[A-Z0-9_]+)"),
    re.compile(r'"(NCCL_[A-Z0-9_]*[A-Z0-9])"'),
)
RELEASE = re.compile(r"^v2\.(\d+)\.(\d+)-(\d+)$")


def release_tags(repo: str) -> list[str]:
    tags = subprocess.run(
        ["git", "-C", repo, "tag"], capture_output=True, text=True, check=True
    ).stdout.split()
    found = [(tuple(int(g) for g in m.groups()), tag) for tag in tags if (m := RELEASE.match(tag))]
    return [tag for _, tag in sorted(found)]


def variables_at(repo: str, tag: str) -> set[str]:
    grep = subprocess.run(
        ["git", "-C", repo, "grep", "-h", "-E", "-e", "NCCL_PARAM|NCCL_", tag, "--", "src"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = set()
    for pattern in PATTERNS:
        for match in pattern.finditer(grep):
            name = match.group(1)
            names.add(name if name.startswith("NCCL_") else f"NCCL_{name}")
    return names


def main(repo: str) -> None:
    tags = release_tags(repo)
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    for tag in tags:
        for name in variables_at(repo, tag):
            first.setdefault(name, tag)
            last[name] = tag
    print("nccl:")
    print("  library: NCCL")
    print("  source: https://github.com/NVIDIA/nccl")
    print(
        '  how: NCCL_PARAM(Name, "SUFFIX", ...), DEFINE_NCCL_PARAM(..., NCCL_X, ...) and "NCCL_X" '
        "string literals under src/ at each release tag (scripts/update_known_env.py)"
    )
    print(f"  tags: {tags[0]} to {tags[-1]}, {len(tags)} release tags")
    print("  variables:")
    for name in sorted(first):
        print(f"    {name}: {first[name]} to {last[name]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
