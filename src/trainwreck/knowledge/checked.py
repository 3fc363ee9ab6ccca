"""An entry's `checked` block: what its facts were checked against, and whether it still holds.

The block records a claim-by-claim check by someone who did not write the entry (the method and
the ledger format are in docs/audits.md). It carries the digest of the entry's content at the time
of the check, so an entry edited afterwards is told apart from one that was checked as it stands,
offline and without git history. The digest leaves out the fields an audit itself changes
(`checked`, `status`, `updated`), so recording the check does not invalidate it, and the
relations, which other entries' authors extend.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwreck.model import Entry, Problem

# Fields the digest leaves out: the audit writes them; and `related`, which the author of another
# entry extends when linking both ways: a relation's note is checked with the entry that adds it,
# and `check` judges the links themselves (they exist, mutual ones are mutual).
UNDIGESTED = ("checked", "status", "updated", "related")
# ... and, at any depth, a code block's `runs`: a test under tests/examples/ vouches for it, not the
# audit, so marking an example's runnability does not invalidate a check of the entry's facts.
UNDIGESTED_NESTED = ("runs",)
DIGEST_LENGTH = 12


def content_digest(data: dict[str, Any]) -> str:
    """A stable digest of the entry's content: canonical JSON of every field but UNDIGESTED."""
    content = _without_nested({key: value for key, value in data.items() if key not in UNDIGESTED})
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:DIGEST_LENGTH]


def _without_nested(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nested(v) for k, v in value.items() if k not in UNDIGESTED_NESTED}
    if isinstance(value, list):
        return [_without_nested(v) for v in value]
    return value


@dataclass(frozen=True)
class ClaimTotals:
    checked: int
    held: int
    corrected: int
    unconfirmed: int


@dataclass(frozen=True)
class Checked:
    """An entry's `checked` block as the schema defines it (values the schema rejects read as
    empty, so a page built from an entry that `check` would refuse still renders)."""

    date: str
    by: str
    ledger: str
    claims: ClaimTotals
    against: tuple[str, ...]
    not_verified: tuple[str, ...]
    digest: str

    @classmethod
    def from_dict(cls, data: Any) -> Checked | None:
        """The block of an entry's data (`entry.data.get("checked")`), or None without one."""
        if not isinstance(data, dict):
            return None
        claims = data.get("claims") if isinstance(data.get("claims"), dict) else {}
        return cls(
            date=_text(data.get("date")),
            by=_text(data.get("by")),
            ledger=_text(data.get("ledger")),
            claims=ClaimTotals(*(_count(claims.get(key)) for key in CLAIM_KEYS)),
            against=_texts(data.get("against")),
            not_verified=_texts(data.get("not_verified")),
            digest=_text(data.get("digest")),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "date": self.date,
            "by": self.by,
            "ledger": self.ledger,
            "claims": {key: getattr(self.claims, key) for key in CLAIM_KEYS},
            "against": list(self.against),
            "digest": self.digest,
        }
        if self.not_verified:
            out["not_verified"] = list(self.not_verified)
        return out


CLAIM_KEYS = ("checked", "held", "corrected", "unconfirmed")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def is_current(entry: Entry) -> bool:
    """The entry has a `checked` block whose digest matches its content as it stands."""
    checked = entry.data.get("checked")
    return isinstance(checked, dict) and checked.get("digest") == content_digest(entry.data)


def missing_check_problem(entry: Entry) -> Problem | None:
    """A warning for an entry with no `checked` block (`trainwreck check --require-checked`)."""
    if isinstance(entry.data.get("checked"), dict):
        return None
    return entry.document.problem(
        ("id",),
        "no checked block: this entry has not been checked claim by claim by someone who did "
        "not write it (docs/audits.md)",
        severity="warning",
    )


def checked_problems(entry: Entry, root: Path) -> list[Problem]:
    """A ledger that is missing, totals that do not add up, and warnings for a check that no
    longer describes the entry or a status it does not support. (The block's shape is the
    schema's business.)"""
    document = entry.document
    checked = entry.data.get("checked")
    status = entry.data.get("status")
    digest = content_digest(entry.data)
    if not isinstance(checked, dict):
        if status in ("reviewed", "verified"):
            return [
                document.problem(
                    ("status",),
                    f"status '{status}' needs a checked block (an independent claim-by-claim "
                    "check, docs/audits.md)",
                    severity="warning",
                )
            ]
        return []
    problems = []
    ledger = checked.get("ledger")
    if isinstance(ledger, str) and not (root / ledger).is_file():
        problems.append(document.problem(("checked", "ledger"), f"no ledger file {ledger}"))
    recorded = checked.get("digest")
    if isinstance(recorded, str) and recorded != digest:
        problems.append(
            document.problem(
                ("checked", "digest"),
                f"the entry changed after it was checked on {checked.get('date', '?')}: "
                f"check the changed claims again, then set digest: {digest}",
                severity="warning",
            )
        )
    claims = checked.get("claims")
    if isinstance(claims, dict) and all(
        isinstance(claims.get(k), int) for k in ("checked", "held", "corrected", "unconfirmed")
    ):
        total = claims["held"] + claims["corrected"] + claims["unconfirmed"]
        if total != claims["checked"]:
            problems.append(
                document.problem(
                    ("checked", "claims"),
                    f"held + corrected + unconfirmed is {total}, not the {claims['checked']} "
                    "claims checked",
                )
            )
    return problems
