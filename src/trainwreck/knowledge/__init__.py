"""The knowledge base: the entries, rules and notebooks of one checkout, read once.

    kb = KnowledgeBase.load(root)
    kb.entries            # every entry that parses (model.Entry, with source positions)
    kb.entry_problems     # a Problem for each entry file that does not parse
    kb.rules              # rules/model.LoadedRules: validated rules, their documents, problems
    kb.rule_links         # rule id -> what each rule file says about its entry (unvalidated)
    kb.notebooks          # notebook stem -> path under notebooks/

Each part is read on first use and kept, so a stage pays only for what it needs (check never
validates rules; compile never lists notebooks) and no stage reads a file twice. The relation
vocabulary (`relations`) and the entry <-> rule links (`links`) live beside it.

Layering: the knowledge base sits on the loader (`trainwreck.model`) and the rules model
(`trainwreck.rules.model`); the stages (check, compile, diagnose, review, site, reproduce) sit on
it. Nothing here imports a stage.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from trainwreck.knowledge.links import RuleLink
from trainwreck.model import (
    DocumentError,
    Entry,
    Problem,
    display_path,
    entry_files,
    load_entry,
    load_yaml,
)

if TYPE_CHECKING:
    from trainwreck.rules.model import LoadedRules

__all__ = ["KnowledgeBase", "RuleLink"]


class KnowledgeBase:
    """One checkout's entries, rules and notebooks, loaded lazily and at most once."""

    def __init__(self, root: Path | str, rules_dir: Path | None = None) -> None:
        self.root = Path(root)
        self.rules_dir = rules_dir or self.root / "rules"
        # Entry files read so far, by resolved path: an Entry, or the DocumentError it raised.
        self._read: dict[Path, Entry | DocumentError] = {}

    @classmethod
    def load(cls, root: Path | str, rules_dir: Path | None = None) -> KnowledgeBase:
        return cls(root, rules_dir)

    # --- entries ---------------------------------------------------------------------------

    def entry_at(self, path: Path) -> Entry:
        """The entry in `path` (any file, not only under entries/), read once.
        Raises DocumentError when it cannot be parsed."""
        key = path.resolve()
        if key not in self._read:
            try:
                self._read[key] = load_entry(path, self.root)
            except DocumentError as exc:
                self._read[key] = exc
        found = self._read[key]
        if isinstance(found, DocumentError):
            raise found
        return found

    @cached_property
    def entry_files(self) -> list[Path]:
        return entry_files(self.root)

    @cached_property
    def _entry_load(self) -> tuple[list[Entry], list[Problem]]:
        entries: list[Entry] = []
        problems: list[Problem] = []
        for path in self.entry_files:
            try:
                entries.append(self.entry_at(path))
            except DocumentError as exc:
                problems.append(exc.problem)
        return entries, problems

    @property
    def entries(self) -> list[Entry]:
        """Every entry under entries/ that parses, in file-name order (no schema validation:
        that is check's job)."""
        return self._entry_load[0]

    @property
    def entry_problems(self) -> list[Problem]:
        """A problem for each entry file that does not parse."""
        return self._entry_load[1]

    @cached_property
    def by_id(self) -> dict[str, Entry]:
        """Entries by id (the file name); the first file wins on a clash, which check reports."""
        found: dict[str, Entry] = {}
        for entry in self.entries:
            found.setdefault(entry.id, entry)
        return found

    def entry(self, entry_id: str) -> Entry | None:
        return self.by_id.get(entry_id)

    # --- rules -----------------------------------------------------------------------------

    @cached_property
    def rules(self) -> LoadedRules:
        """Every rule under rules_dir, validated and normalised (rules/model.load_rules)."""
        from trainwreck.rules.model import load_rules

        return load_rules(self.root, self.rules_dir)

    @cached_property
    def rule_links(self) -> dict[str, RuleLink]:
        """rule id -> the entry it names, for every rule file that parses, valid or not (the
        last file wins on a clash of ids; compile reports the clash)."""
        links: dict[str, RuleLink] = {}
        folder = self.rules_dir
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            try:
                document = load_yaml(path, display_path(path, self.root))
            except DocumentError:
                continue  # `trainwreck compile` reports broken rules
            data = document.data
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                entry_id = data.get("entry")
                links[data["id"]] = RuleLink(
                    data["id"], entry_id if isinstance(entry_id, str) else None, document
                )
        return links

    def validated_rule_links(self) -> list[RuleLink]:
        """The links of the rules that validated, in their load order."""
        return [
            RuleLink(rule["id"], rule["entry"], self.rules.documents[rule["id"]])
            for rule in self.rules.rules
            if rule["id"] in self.rules.documents
        ]

    # --- notebooks -------------------------------------------------------------------------

    @cached_property
    def notebooks(self) -> dict[str, Path]:
        """notebook stem -> its file under notebooks/ (regular files only)."""
        folder = self.root / "notebooks"
        return {path.stem: path for path in sorted(folder.glob("*.ipynb")) if path.is_file()}
