"""Hang forensics end to end: find the dumps and stacks among the inputs, read them, analyse
them, and conclude in one finding (diagnose) or one alignment table (explain)."""

from __future__ import annotations

import gc
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwreck.findings import Evidence, Finding, Skipped
from trainwreck.forensics import stacks as stk
from trainwreck.forensics.dumps import SNIFF_BYTES, DumpError, rank_from_name, read_raw, sniff

if TYPE_CHECKING:  # (the analysis is imported when there are dumps: diagnose only sniffs)
    from trainwreck.forensics.analysis import GroupAnalysis
    from trainwreck.forensics.traces import RankTrace

# The entries a hang's dumps point at (entries/*.yaml).
DESYNC = "collective-desync-deadlock"
TIMEOUT = "nccl-collective-timeout"
P2P_TRANSPORT = "nccl-p2p-hang"
HANG_ENTRIES = (DESYNC, TIMEOUT, P2P_TRANSPORT)
RULE_ID = "flight-recorder"  # what a finding from the dumps names as its rule


def kind_of(path: str) -> str | None:
    """ "dump" or "stack" when a file is one by content; None for an ordinary log."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return None
    if sniff(head):
        return "dump"
    if stk.sniff_stack(head.decode("utf-8", "replace")):
        return "stack"
    return None


@dataclass
class Forensics:
    """Everything the dumps and stacks said."""

    groups: list[GroupAnalysis] = field(default_factory=list)
    traces: int = 0
    stack_dumps: list[stk.StackDump] = field(default_factory=list)
    stacks: stk.StackGroups | None = None
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    missing: tuple[int, ...] = ()


def analyse(files: list[tuple[str, str]], rank_pattern: re.Pattern[str] | None = None) -> Forensics:
    """Read the dump and stack files (display, path) and analyse them; a file that cannot be
    used is skipped with its reason, never raised."""
    # Unpickling builds millions of dicts that all stay alive until traced: the cyclic
    # collector would rescan them again and again for nothing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyse(files, rank_pattern)
    finally:
        if was_enabled:
            gc.enable()


def _analyse(files: list[tuple[str, str]], rank_pattern: re.Pattern[str] | None) -> Forensics:
    from trainwreck.forensics.analysis import analyse_group, expected_members
    from trainwreck.forensics.traces import Signatures, trace

    result = Forensics()
    signatures = Signatures()
    traces: dict[int, RankTrace] = {}
    kinds: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    for display, path in files:
        if kind_of(path) == "stack":
            _read_stack(result, display, path, rank_pattern)
            continue
        try:
            raw, header = read_raw(path, display, rank_pattern, fast=True)
        except DumpError as exc:
            result.skipped.append(Skipped(display, exc.message, True))
            continue
        if header.rank is None:
            result.skipped.append(
                Skipped(
                    display, "no rank in the dump or its file name (use --rank-from REGEX)", True
                )
            )
            continue
        if header.rank in traces:
            result.skipped.append(
                Skipped(
                    display,
                    f"duplicate rank {header.rank} (already read from {traces[header.rank].file}); ignored",
                )
            )
            continue
        if not header.version.startswith("2."):
            result.notes.append(
                f"{display}: dump version '{header.version}' is not 2.x; read as far as its fields go"
            )
        rank_trace = trace(raw, header, signatures)
        del raw
        if rank_trace.bad_entries:
            result.skipped.append(
                Skipped(display, f"{rank_trace.bad_entries} entries that are not records; skipped")
            )
        traces[header.rank] = rank_trace
        kinds[header.kind] += 1
        versions[header.version] += 1
    if len(kinds) > 1:
        result.notes.append(
            "dumps mix "
            + " and ".join(f"{k} ({n})" for k, n in sorted(kinds.items()))
            + "; JSON dumps carry no Python frames"
        )
    if len(versions) > 1:
        result.notes.append(
            "dumps of several versions: "
            + ", ".join(f"{v} ({n})" for v, n in sorted(versions.items()))
        )
    all_traces = list(traces.values())
    result.traces = len(all_traces)
    names: dict[str, str] = {}
    for rank_trace in all_traces:
        for name, group in rank_trace.groups.items():
            names.setdefault(name, group.desc)
    expected_all: set[int] = set()
    for name, desc in sorted(names.items()):
        expected = expected_members(name, desc, all_traces)
        expected_all |= expected
        result.groups.append(analyse_group(name, all_traces, expected, signatures))
    result.missing = tuple(sorted(expected_all - set(traces)))
    result.stacks = stk.group_stacks(result.stack_dumps)
    return result


def _read_stack(
    result: Forensics, display: str, path: str, pattern: re.Pattern[str] | None
) -> None:
    try:
        if Path(path).stat().st_size > stk.MAX_STACK_BYTES:
            result.skipped.append(Skipped(display, "stack dump larger than 16 MiB; skipped", True))
            return
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        result.skipped.append(Skipped(display, f"unreadable: {exc.strerror or exc}", True))
        return
    dump = stk.parse_stacks(text, display, rank_from_name(path, pattern))
    if dump is None:
        result.skipped.append(Skipped(display, "stack dump without a thread; skipped", True))
    elif dump.rank is None:
        result.skipped.append(
            Skipped(display, "stack dump without a rank in its name (use --rank-from REGEX)", True)
        )
    else:
        result.stack_dumps.append(dump)


@dataclass(frozen=True)
class Conclusion:
    entry: str
    ranks: tuple[int, ...]  # the initiating ranks
    collective: str
    look_at: str  # one line: what to look at on that rank
    why: tuple[str, ...]
    evidence: tuple[Evidence, ...]


def conclude(found: Forensics) -> Conclusion | None:
    """The one answer: the group with culprits first, then a mismatch, unmatched p2p, a late
    rank, missing dumps; None when the dumps show nothing wrong."""
    from trainwreck.forensics.analysis import ranges

    stacks_of = {dump.rank: dump for dump in found.stack_dumps}
    for group in found.groups:
        if group.culprits and not group.desync_first:
            first = group.culprits[0]
            entry = DESYNC if group.mismatch is not None else TIMEOUT
            why = [
                f"group {group.name} ({group.desc or 'no desc'}): ranks {ranges(group.blamed)} {first.why}"
            ]
            if group.culprit_count > len(group.culprits):
                why.append(f"{group.culprit_count} ranks in all")
            evidence = [
                _record_evidence(c.file, c.record_id, c.rank, f"last collective {c.last}")
                for c in group.culprits[:4]
            ]
            look = f"look at rank {first.rank}: {first.why}; its last collective was {first.last}"
            if first.frames:
                look += f", issued from {first.frames[0]}"
            return Conclusion(
                entry,
                group.blamed,
                group.diverging_op,
                _with_stack(look, first.rank, found, stacks_of, evidence),
                tuple(why),
                tuple(evidence),
            )
    for group in found.groups:
        if group.mismatch is not None:
            m = group.mismatch
            values = "; ".join(f"{v} on ranks {r}" for v, r in m.values)
            why = [
                f"group {group.name}: collective #{m.seq} differs in {m.what}: {values}",
                f"{group.mismatches} collectives mismatch",
            ]
            if group.culprits:
                why.append(
                    f"then ranks {ranges([c.rank for c in group.culprits])} {group.culprits[0].why}"
                )
            evidence = [
                _record_evidence(file, record, rank, f"collective #{m.seq} differs in {m.what}")
                for rank, file, record in group.mismatch_records
            ]
            look = f"look at rank {m.minority[0]}: its collective #{m.seq} differs in {m.what} from the other ranks'"
            return Conclusion(
                DESYNC,
                m.minority,
                f"#{m.seq}",
                _with_stack(look, m.minority[0], found, stacks_of, evidence),
                tuple(why),
                tuple(evidence),
            )
    for group in found.groups:
        if group.unmatched_p2p:
            why = tuple(f"group {group.name}: {line}" for line in group.unmatched_p2p)
            return Conclusion(
                DESYNC, (), "p2p", "look at the ranks of " + group.unmatched_p2p[0], why, ()
            )
    if found.missing:
        look = f"look at ranks {ranges(found.missing)}: no dump was read for them (did they die before dumping?)"
        return Conclusion(
            TIMEOUT, found.missing, "", look, (f"{len(found.missing)} ranks without a dump",), ()
        )
    if found.stacks is not None:
        rank = found.stacks.minority[0]
        evidence = []
        look = _with_stack(f"look at rank {rank}", rank, found, stacks_of, evidence)
        return Conclusion(
            TIMEOUT, found.stacks.minority, "", look, ("the ranks' stacks differ",), tuple(evidence)
        )
    for group in found.groups:
        if group.late is not None:
            late = group.late
            look = f"look at rank {late.rank}: it issued {late.times} of {late.of} collectives last (median {late.lag_ms} ms behind)"
            return Conclusion(
                TIMEOUT, (late.rank,), "", look, (f"group {group.name}: a straggler",), ()
            )
    return None


def _record_evidence(file: str, record_id: int, rank: int, text: str) -> Evidence:
    return Evidence(
        file=file, line=record_id, text=f"record {record_id}: {text}", rank=rank, part="dump"
    )


def _with_stack(
    look: str,
    rank: int,
    found: Forensics,
    stacks_of: dict[Any, stk.StackDump],
    evidence: list[Evidence],
) -> str:
    """Add what the rank's stack shows when it differs from the majority."""
    groups = found.stacks
    dump = stacks_of.get(rank)
    if groups is None or dump is None or rank not in groups.minority:
        return look
    thread = dump.main_thread()
    evidence.append(
        Evidence(
            file=dump.file,
            line=thread.at if thread else 1,
            text=f"stack of rank {rank} at {groups.differs_at}",
            rank=rank,
            part="stack",
        )
    )
    return (
        f"{look}; its stack is at {groups.differs_at} while the others are at {groups.majority_at}"
    )


def finding(conclusion: Conclusion, summary: dict[str, Any], others: list[Finding]) -> Finding:
    """The dumps' finding, absorbing the log findings of the hang entries (one finding, not three)."""
    merged = [f for f in others if f.entry in HANG_ENTRIES]
    rules = (RULE_ID, *[r for f in merged for r in f.rules])
    ranks = sorted({*conclusion.ranks, *[r for f in merged for r in f.ranks if isinstance(r, int)]})
    confidence = max([0.9, *[f.confidence for f in merged]])
    initiating: Any = (
        conclusion.ranks[0] if len(conclusion.ranks) == 1 else (list(conclusion.ranks) or None)
    )
    return Finding(
        entry=conclusion.entry,
        rule=RULE_ID,
        rules=tuple(dict.fromkeys(rules)),
        title=summary.get("title", conclusion.entry),
        rule_title="Flight Recorder and stack dumps of the ranks",
        confidence=confidence,
        ranks=tuple(ranks),
        initiating_rank=initiating,
        evidence=conclusion.evidence + tuple(e for f in merged for e in f.evidence),
        root_cause=summary.get("root_cause", ""),
        fix=summary.get("fix", {"title": "", "steps": []}),
        verify=tuple(summary.get("verify", [])),
        url=summary.get("url", ""),
        why=(*conclusion.why, *[w for f in merged for w in f.why]),
        notes=(conclusion.look_at, *[n for f in merged for n in f.notes]),
        detectors={k: v for f in merged for k, v in f.detectors.items()},
    )


def split_inputs(
    inputs: list[tuple[str, Any]],
) -> tuple[list[tuple[str, str]], list[tuple[str, Any]]]:
    """(dumps and stacks, ordinary logs) among diagnose's inputs. Only regular files are
    sniffed: stdin, a FIFO or a device is a log stream, and reading its head would consume it."""
    forensic: list[tuple[str, str]] = []
    logs: list[tuple[str, Any]] = []
    for display, source in inputs:
        if isinstance(source, str) and source != "-" and os.path.isfile(source) and kind_of(source):
            forensic.append((display, source))
        else:
            logs.append((display, source))
    return forensic, logs


def merge(
    findings: list[Finding],
    files: list[tuple[str, str]],
    entries: dict[str, dict[str, Any]],
    rank_pattern: re.Pattern[str] | None,
    skipped: list[Skipped],
    warnings: list[str],
) -> list[Finding]:
    """The log findings with the dumps' conclusion folded in: the hang entries' findings become
    one, whose initiating rank and first evidence come from the dumps."""
    found = analyse(files, rank_pattern)
    skipped.extend(found.skipped)
    warnings.extend(found.notes)
    conclusion = conclude(found)
    if conclusion is None:
        return findings
    merged = finding(conclusion, entries.get(conclusion.entry, {}), findings)
    return [merged, *(f for f in findings if f.entry not in HANG_ENTRIES)]
