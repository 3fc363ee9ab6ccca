"""Across ranks, per process group: where the ranks' collectives diverge and who is to blame.

Each group is aligned on `collective_seq_id`, the n-th collective a rank issued on that group
(collectives are matched by position). Ring buffers keep only their last records, so ranks may
hold different ranges; mismatches are looked for only on the sequence ids every rank still
holds. What is found:

- culprits: the ranks whose last enqueued collective is behind the others' (they never issued
  the next one), or that sit in `started` on a collective the others completed;
- mismatches: the first collective whose op, sizes or dtypes differ between ranks, with the
  values and which ranks hold each;
- p2p ops with no partner; ranks whose dumps are missing; buffers that rolled over; and, when
  no rank is stuck, the rank that is repeatedly the last to issue a collective.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from trainwreck.forensics.dumps import Record
from trainwreck.forensics.traces import GroupTrace, RankTrace, Signatures

MAX_CULPRITS = 16  # culprits described in full; the rest are counted
LATE_SHARE = 0.5  # a rank last to join in more than this share of collectives is reported
LATE_MIN_MS = 1.0  # and only when it is that far behind (median): with two ranks one is
# always last, by microseconds
LATE_MIN = 4  # collectives needed before lateness means anything


def ranges(ranks: list[int] | tuple[int, ...] | set[int]) -> str:
    """0,1,2,3,7 -> "0-3,7": rank sets of thousands stay one short line."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for rank in ordered:
        if start is None:
            start = prev = rank
        elif rank == prev + 1:
            prev = rank
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = rank
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts) or "-"


@dataclass(frozen=True)
class Culprit:
    rank: int
    why: str  # "never issued #8 gloo:all_reduce" / "stuck in started on #8 ..."
    last: str  # its last collective, described
    file: str
    record_id: int  # of its last collective
    frames: tuple[str, ...]  # the Python frames that issued its last collective (pickle dumps)


@dataclass(frozen=True)
class Mismatch:
    seq: int
    what: str  # "op", "input sizes", ...
    values: tuple[tuple[str, str], ...]  # (value, ranks) most common first
    minority: tuple[int, ...]  # ranks outside the most common value


@dataclass(frozen=True)
class Late:
    rank: int
    times: int  # collectives it issued last
    of: int  # collectives compared
    lag_ms: float  # median time after the median rank


@dataclass(frozen=True)
class Row:
    """Ranks of a group that stand at the same place: the alignment table's line."""

    ranks: str  # as ranges
    count: int
    enqueued: int
    completed: int
    last: str  # the op of the last collective they issued


@dataclass(frozen=True)
class GroupAnalysis:
    name: str
    desc: str
    ranks: tuple[int, ...]  # ranks whose dumps hold the group
    missing: tuple[int, ...]  # expected members without a dump
    window: tuple[int, int]  # sequence ids every rank holds (first, last); (0, -1) when none
    rolled_over: tuple[tuple[int, int], ...]  # (rank, first seq held) for buffers that wrapped
    last_enqueued: tuple[tuple[int, str], ...]  # (seq, ranks) per distinct value
    rows: tuple[Row, ...]  # ranks grouped by (last enqueued, last completed), furthest first
    diverges_at: int | None  # the first collective not every rank issued
    diverging_op: str
    culprits: tuple[Culprit, ...]
    culprit_count: int
    stuck_started: bool  # culprits sit in `started` while others completed
    mismatch: Mismatch | None
    mismatches: int  # collectives that mismatch in the window
    mismatch_records: tuple[tuple[int, str, int], ...]  # (rank, file, record id) of the minority
    unmatched_p2p: tuple[str, ...]
    late: Late | None

    @property
    def desync_first(self) -> bool:
        """A mismatch before the ranks drift apart: the desync is the cause, the ranks left
        behind are its effect (a collective issued on one rank only pairs with the others' next)."""
        return self.mismatch is not None and (
            self.diverges_at is None or self.mismatch.seq < self.diverges_at
        )

    @property
    def blamed(self) -> tuple[int, ...]:
        if self.desync_first:
            return self.mismatch.minority  # type: ignore[union-attr]
        if self.culprits:
            return tuple(c.rank for c in self.culprits)
        if self.mismatch is not None:
            return self.mismatch.minority
        return ()


_FIELDS = ("op", "input sizes", "output sizes", "input dtypes", "output dtypes")


def _frames(record: Record) -> tuple[str, ...]:
    """The record's frames, innermost first, from the first one outside torch."""
    frames = list(record.frames)
    while len(frames) > 1 and "site-packages/torch/" in frames[0].filename:
        frames.pop(0)
    return tuple(frame.label() for frame in frames[:6])


def _last(group: GroupTrace) -> str:
    """The group's last collective, its state read from pg_status (gloo leaves `state` at
    scheduled and counts completions in pg_status only)."""
    record = group.tail[-1]
    text = record.describe()
    if record.collective_seq_id <= group.last_completed:
        text = text.replace(f"({record.state})", "(completed)")
    return text


def _describe(signatures: Signatures, sig: int | None, seq: int) -> str:
    if sig is None:
        return f"#{seq}"
    op, in_sizes, _, in_dtypes, _ = signatures.value(sig)
    return f"#{seq} {op} sizes {in_sizes} dtypes {in_dtypes}"


def _mismatch(
    members: list[tuple[int, GroupTrace]], window: tuple[int, int], signatures: Signatures
) -> tuple[Mismatch | None, int]:
    """The first collective in the window whose signature differs between ranks, and how many do."""
    first, last = window
    if last < first:
        return None, 0
    width = last - first + 1
    matrix = np.full((len(members), width), -1, np.int32)
    for row, (_, group) in enumerate(members):
        lo, hi = np.searchsorted(group.seqs, [first, last + 1])
        seqs = group.seqs[lo:hi]
        matrix[row, seqs - first] = group.sigs[lo:hi]
    differs = (matrix != matrix[0]).any(axis=0)
    columns = np.flatnonzero(differs)
    if not len(columns):
        return None, 0
    column = int(columns[0])
    values = matrix[:, column]
    common = Counter(values.tolist()).most_common()
    main_sig = common[0][0]
    ranks_of = {sig: [members[i][0] for i in np.flatnonzero(values == sig)] for sig, _ in common}
    # Name the first field that differs between the main value and the others.
    what = "op"
    if main_sig >= 0:
        for other, _ in common[1:]:
            if other < 0:
                continue
            a, b = signatures.value(main_sig), signatures.value(other)
            what = next((name for name, x, y in zip(_FIELDS, a, b, strict=False) if x != y), "op")
            break
    shown = tuple(
        (signatures.describe(sig) if sig >= 0 else "(not held)", ranges(ranks_of[sig]))
        for sig, _ in common[:4]
    )
    minority = tuple(r for sig, _ in common[1:] for r in ranks_of[sig])
    return Mismatch(first + column, what, shown, minority), len(columns)


def _late(members: list[tuple[int, GroupTrace]], window: tuple[int, int]) -> Late | None:
    """The rank that issued the window's collectives last most often, if one stands out."""
    first, last = window
    if last - first + 1 < LATE_MIN or len(members) < 2:
        return None
    times = np.zeros((len(members), last - first + 1), np.int64)
    for row, (_, group) in enumerate(members):
        lo, hi = np.searchsorted(group.seqs, [first, last + 1])
        times[row, group.seqs[lo:hi] - first] = group.times[lo:hi]
    if not times.any():
        return None
    latest = times.argmax(axis=0)
    counts = np.bincount(latest, minlength=len(members))
    row = int(counts.argmax())
    if counts[row] <= LATE_SHARE * times.shape[1]:
        return None
    lag = (times[row] - np.median(times, axis=0)) / 1e6
    if float(np.median(lag)) < LATE_MIN_MS:
        return None
    return Late(
        members[row][0], int(counts[row]), int(times.shape[1]), round(float(np.median(lag)), 3)
    )


def _unmatched_p2p(traces: list[RankTrace], group: str) -> tuple[str, ...]:
    """p2p ops of the group with no partner: a send src->dst needs a recv dst<-src as often."""
    sends: Counter[tuple[int, int]] = Counter()
    recvs: Counter[tuple[int, int]] = Counter()
    for rank_trace in traces:
        for record in rank_trace.p2p:
            if record.pg_name != group or (peers := record.peers()) is None:
                continue
            (sends if record.op == "send" else recvs if record.op == "recv" else Counter())[
                peers
            ] += 1
    out = []
    for pair in sorted(set(sends) | set(recvs)):
        if sends[pair] != recvs[pair]:
            src, dst = pair
            out.append(f"send {src}->{dst} x{sends[pair]} but recv {dst}<-{src} x{recvs[pair]}")
    return tuple(out)


def analyse_group(
    name: str, traces: list[RankTrace], expected: set[int], signatures: Signatures
) -> GroupAnalysis:
    members = sorted(
        ((t.rank, t.groups[name]) for t in traces if name in t.groups), key=lambda m: m[0]
    )
    by_rank = {t.rank: t for t in traces}
    desc = members[0][1].desc if members else ""
    held_first = {rank: int(g.seqs[0]) for rank, g in members if len(g.seqs)}
    held_last = {rank: int(g.seqs[-1]) for rank, g in members if len(g.seqs)}
    window = (max(held_first.values()), min(held_last.values())) if held_first else (0, -1)
    rolled = tuple((rank, first) for rank, first in sorted(held_first.items()) if first > 1)
    enqueued = {rank: g.last_enqueued for rank, g in members}
    values: dict[int, list[int]] = {}
    for rank, seq in enqueued.items():
        values.setdefault(seq, []).append(rank)
    last_enqueued = tuple((seq, ranges(rs)) for seq, rs in sorted(values.items(), reverse=True))
    places: dict[tuple[int, int, str], list[int]] = {}
    for rank, group in members:
        op = group.tail[-1].profiling_name if group.tail else "-"
        places.setdefault((group.last_enqueued, group.last_completed, op), []).append(rank)
    rows = tuple(
        Row(ranges(rs), len(rs), enq, done, op)
        for (enq, done, op), rs in sorted(
            places.items(), key=lambda kv: (-kv[0][0], -kv[0][1], min(kv[1]))
        )
    )
    culprits: list[Culprit] = []
    culprit_count = 0
    diverges_at: int | None = None
    diverging_op = ""
    stuck = False
    if enqueued:
        low, high = min(enqueued.values()), max(enqueued.values())
        if low < high:
            diverges_at = low + 1
            ahead = next(g for _, g in members if g.last_enqueued > low)
            diverging_op = _describe(signatures, ahead.sig_at(diverges_at), diverges_at)
            behind = [(r, g) for r, g in members if g.last_enqueued == low]
            culprit_count = len(behind)
            for rank, group in behind[:MAX_CULPRITS]:
                last = group.tail[-1] if group.tail else None
                culprits.append(
                    Culprit(
                        rank,
                        f"never issued {diverging_op}",
                        _last(group) if last else "no collective held",
                        by_rank[rank].file,
                        last.record_id if last else -1,
                        _frames(last) if last else (),
                    )
                )
        else:
            done = [r for r, g in members if g.last_completed >= high]
            stuck_ranks = [(r, g) for r, g in members if high in g.started_not_done]
            if done and stuck_ranks:
                stuck = True
                diverges_at = high
                diverging_op = _describe(signatures, stuck_ranks[0][1].sig_at(high), high)
                culprit_count = len(stuck_ranks)
                for rank, group in stuck_ranks[:MAX_CULPRITS]:
                    last = group.tail[-1]
                    culprits.append(
                        Culprit(
                            rank,
                            f"stuck in started on {diverging_op} that ranks {ranges(done)} completed",
                            _last(group),
                            by_rank[rank].file,
                            last.record_id,
                            _frames(last),
                        )
                    )
    mismatch, mismatches = _mismatch(members, window, signatures)
    traces_of = dict(members)
    mismatch_records = tuple(
        (rank, by_rank[rank].file, traces_of[rank].record_at(mismatch.seq) or -1)
        for rank in (mismatch.minority[:4] if mismatch else ())
    )
    return GroupAnalysis(
        name=name,
        desc=desc,
        ranks=tuple(r for r, _ in members),
        missing=tuple(sorted(expected - set(by_rank))),
        window=window,
        rolled_over=rolled,
        last_enqueued=last_enqueued,
        rows=rows,
        diverges_at=diverges_at,
        diverging_op=diverging_op,
        culprits=tuple(culprits),
        culprit_count=culprit_count,
        stuck_started=stuck,
        mismatch=mismatch,
        mismatches=mismatches,
        mismatch_records=mismatch_records,
        unmatched_p2p=_unmatched_p2p(traces, name),
        late=None if culprits else _late(members, window),
    )


def expected_members(name: str, desc: str, traces: list[RankTrace]) -> set[int]:
    """A group's members as pg_config lists them (by name, else by desc); the default group
    (whose pg_config key torch 2.13 gloo writes as "") spans every rank any pg_config names."""
    found: set[int] = set()
    for rank_trace in traces:
        ranks = rank_trace.group_ranks.get(name) or rank_trace.group_ranks.get(f"desc:{desc}")
        if ranks:
            found.update(ranks)
    if not found and desc == "default_pg":
        for rank_trace in traces:
            for ranks in rank_trace.group_ranks.values():
                found.update(ranks)
    return found or {t.rank for t in traces if name in t.groups}
