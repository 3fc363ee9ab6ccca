"""The paste-shape layer: what every text rule sees instead of the raw line.

Real logs reach `diagnose` in many shapes: launchers and loggers put prefixes in front of every
line, terminals colour, pad and wrap them, pretty printers draw boxes around tracebacks, and people
paste them into issue trackers that re-wrap them again. Rules are written against the message
itself; this module turns each shape back into it, once, for all rules.

Two steps, both keeping the number of lines (so evidence keeps its file:line):

`normalize_block(block)`, on whole blocks of lines before any matching:
- ANSI escape sequences (colour, cursor) are removed;
- a CR before a line end is dropped, a lone CR (progress bars redrawing) becomes a space;
- rich-style box tracebacks lose their borders: `│ text   │` -> `text`; a box line filled up to
  its border continues on the next one (pretty printers wrap at word boundaries, and fold a word
  longer than the box, a deep path or a long function name, across lines: a box line that is one
  word up to the border is joined with the next without a space);
- a line wrapped by a terminal at 80 or 120 columns, or inside a box, is joined with its
  continuation; so is a message split after a trailing single space ("signal: \\nBus error.").
  The joined text goes on the first line and the continuation line is left empty.

`split_prefix(line)`, on each candidate line: removes the prefixes in front of the message and
the right padding after it (spaces up to the terminal width) and returns the rank they name (or
None) and the message. Prefixes may be stacked; recognised are
torchrun `[rankN]:` / `[defaultN]:` (with an optional `host: `), Open MPI `[job,rank]<stdout>:`
(with an optional date), SLURM `srun --label` task numbers (`3: `), `host:pid:tid [dev]` (NCCL),
Ray and vLLM `(pid=N)` / `(Name pid=N, ip=...)`, k8s-style `worker-0: ` host prefixes, ISO and
syslog timestamps with an optional level, dmesg `[  12.345678]` and `[Sun Feb 20 06:16:58 2022]`,
`HH:MM:SS LEVEL`, pasted line numbers `[1234] `, markdown quotes `> ` and leading indentation;
system logs in other shapes: `dmesg -H` / `--reltime` stamps (`[  +0.000316]`, `[Jan27 23:04]`),
a printk caller id (`[  T125]`), `dmesg -x` levels (`kern  :err   : `) and the journal's bare
`kernel: ` tag (with or without a host before it); and the prefixes of some loggers: vLLM's
`ERROR 09-05 01:18:30 [file.py:N] `, torch's glog-style `W0920 09:10:41.194000 84933 file.py:N] `,
Python logging's `WARNING:logger.name:`, TorchX `trainer/0 [1]:` (a rank) and a host address
`10.96.202.43: ` (pdsh).
Time stamps stay in the raw line (the engine reads times from it).
"""

from __future__ import annotations

import re
from typing import Any

WRAP_WIDTHS = (80, 120)  # terminal widths whose hard wraps are joined
_FULL = b"\xff\xf0"  # (0xFF never occurs in UTF-8) marks a box line filled up to its border
_FOLD = b"\xff\xf1"  # marks a box line that is one word folded at its border

_ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_BOX_CHARS = ("\u2502".encode(), "\u2503".encode(), "\u2551".encode())
_BOX_DRAWING = (b"\xe2\x94", b"\xe2\x95")  # U+2500 to U+257F, a box-drawing character's lead bytes
_BORDER = rb"(?:\xe2\x94\x82|\xe2\x94\x83|\xe2\x95\x91)"
_BOX = re.compile(rb"[ \t]*" + _BORDER + rb" ?(.*?)(?P<pad>[ \t]*)" + _BORDER + rb"[ \t]*$")
# A continuation line does not look like the start of a new record.
_NEW_RECORD_SOURCE = (
    rb"\s|\[|\(|\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|Traceback|File \"|[A-Z]\w*(?:Error|Exception|Warning)\b"
    rb"|[\w.-]+:\d+:\d+ \[\d+\]|frame #|\*{3}|={3}|-{3}|[A-Z][a-z]{2} [ \d]\d \d\d:"
    # a logger's upper-case tag and then its date and time: vLLM's "INFO 05-10 12:34:56", DLLogger's
    # "DLL 2020-06-04 01:04:20.355678 - " (whose lines end in a space: an empty unit after the value)
    rb"|[A-Z]{2,8} (?:\d{4}-)?\d\d-\d\d[ T]\d\d:\d\d:\d\d"
)
_NEW_RECORD = re.compile(_NEW_RECORD_SOURCE)
# The prefixes, grouped by the byte they start with (one small regex per group is much faster
# than one alternation of all of them, and a line starting with a plain word tries at most one).
_TORCHRUN = rb"\[(?:rank|default)(?P<r_torchrun>\d+)\]:\s?"
_MPI = rb"\[\d+,(?P<r_mpi>\d+)\]<std(?:out|err)>:\s?"
_ISO = (
    rb"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
    rb"(?:\s*[|:-])?\s*(?:\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?(?:\s*[|:-])?\s*)?"
)
_BRACKETED = (
    _TORCHRUN,
    _MPI,
    _ISO,
    rb"\[\s*\d+\.\d+\]\s?",  # dmesg
    rb"\[\s*\+\d+\.\d+\]\s?",  # dmesg -H / --reltime: time since the previous line
    rb"\[[A-Z][a-z]{2}\d{1,2} \d\d:\d\d\]\s?",  # dmesg -H: the minute a burst starts
    rb"\[\s*[TC]\d+\]\s?",  # dmesg caller id (CONFIG_PRINTK_CALLER), after the time
    rb"\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\s?",  # dmesg -T
    rb"\[\d+\] (?=\S)",  # a pasted line number
)
_NUMERIC = (
    _ISO,
    rb"\d\d:\d\d:\d\d(?:[.,]\d+)? +(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+",
    rb"(?P<r_srun>\d{1,5}): (?=\S)",  # srun --label
    rb"\d{1,3}(?:\.\d{1,3}){3}: (?=\S)",  # pdsh / DeepSpeed multi-node: the host's address
)
_WORDY = (
    rb"(?:(?P<host>[\w.-]+):\s)" + _TORCHRUN,
    rb"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})" + _MPI,
    rb"[\w.-]+:\d+:\d+ \[\d+\] ",  # NCCL host:pid:tid [dev]
    rb"(?P<k8s>[\w.-]*worker[\w.-]*|(?:node|host)[\w.-]*): ",
    rb"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?:[\w.-]+ )?(?:kernel|[\w./-]+(?:\[\d+\])?): ",  # syslog
    rb"(?:[\w.-]+ )?kernel: ",  # journalctl -k -o cat / after an ISO stamp: the kernel's tag
    rb"kern\s*:[a-z]+\s*: ",  # dmesg -x: facility and level
    rb"[\w.-]+/\d+ \[(?P<r_torchx>\d+)\]:",  # TorchX: role/replica [local rank]:
    # vLLM's logger: LEVEL MM-DD HH:MM:SS [file.py:N] (older releases: file.py:N])
    rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ",
    # DLLogger's StdOutBackend (NVIDIA DeepLearningExamples): "DLL {datetime} - " (default_prefix_format)
    rb"DLL \d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)? - ",
    # Python's glog-style torch logging (TORCH_LOGS, torch.distributed.elastic): Lmmdd time pid file:N]
    rb"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ [\w./\\-]+:\d+\] ",
    # logging's default format: LEVEL:logger.name:
    rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:(?=\S)",
)


def _group(alternatives: tuple[bytes, ...]) -> re.Pattern[bytes]:
    return re.compile(b"|".join(b"(?:" + a + b")" for a in alternatives))


_PREFIX_BY_START: dict[int, re.Pattern[bytes]] = {}
for _byte in b"[":
    _PREFIX_BY_START[_byte] = _group(_BRACKETED)
for _byte in b"0123456789":
    _PREFIX_BY_START[_byte] = _group(_NUMERIC)
_PREFIX_BY_START[ord("(")] = _group((rb"\((?:[\w.-]+ )?pid=\d+(?:, ip=[\d.:a-fA-F]+)?\) ",))
_PREFIX_BY_START[ord(">")] = _group((rb"> ",))
_PREFIX_BY_START[ord(" ")] = _PREFIX_BY_START[ord("\t")] = _group((rb"[ \t]+",))
_WORDY_PREFIX = _group(_WORDY)
_MAX_PREFIXES = 8
_MAX_RANK_DIGITS = 9  # as the engine's MAX_RANK_DIGITS


def newlines_of(block: bytes) -> Any:
    """The offsets of the newlines of `block` (a numpy array): what normalize_block and a busy
    block's scan both need, found once."""
    import numpy as np

    return np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)


def normalize_block(block: bytes, newlines: Any = None) -> bytes:
    """The block with terminal and pretty-printer artefacts removed; same number of lines.
    Returns `block` itself when there is nothing to change (the common case costs a few scans).
    `newlines`: newlines_of(block), when the caller has it."""
    shaped = block
    if b"\x1b" in shaped:
        shaped = _ANSI.sub(b"", shaped)
    if b"\r" in shaped:
        shaped = shaped.replace(b"\r\n", b"\n").replace(b"\r", b" ")
    if b"\xe2" in shaped and any(char in shaped for char in _BOX_CHARS):
        shaped = _unbox(shaped)
    # (the markers start with 0xFF: one memchr for it is far cheaper than two 2-byte searches)
    if (b"\xff" in shaped and (_FULL in shaped or _FOLD in shaped)) or _has_join_candidate(
        shaped, newlines if shaped is block else None
    ):
        shaped = _join_wrapped(shaped)
    return shaped


def _has_join_candidate(block: bytes, newlines: Any = None) -> bool:
    """Whether some line may continue on the next one: a message split after a word (exactly one
    trailing space) or a hard wrap at a terminal width (ending in a visible character), followed
    by a line that does not start a new record. Found with numpy over the line ends, so that
    only blocks holding such a line pay for joining."""
    import numpy as np

    data = np.frombuffer(block, dtype=np.uint8)
    if newlines is None:
        newlines = np.flatnonzero(data == 10)
    ends = newlines[newlines + 1 < data.size]  # a line that has a next line
    if ends.size == 0:
        return False
    starts = np.concatenate(([0], newlines[:-1] + 1))[: ends.size]
    lengths = ends - starts
    last = data[np.maximum(ends - 1, 0)]
    # Only lines of a wrap width or ending in a space can continue: the rest is worked out on
    # those alone (most blocks have none).
    maybe = last == 32
    for width in WRAP_WIDTHS:
        maybe |= lengths == width
    picked = np.flatnonzero(maybe)
    if picked.size == 0:
        return False
    ends, lengths, last = ends[picked], lengths[picked], last[picked]
    before_last = data[np.maximum(ends - 2, 0)]
    visible = (last != 32) & (last != 9)
    wrapped = np.isin(lengths, WRAP_WIDTHS) & visible
    split = (last == 32) & (before_last != 32) & (before_last != 9) & (lengths > 20)
    following = data[ends + 1]
    plausible = (following != 10) & (following != 32) & (following != 9) & (following != 91)
    plausible &= following != 40  # '(' and '[' start records (prefixes), never continuations
    for end in ends[(wrapped | split) & plausible].tolist():
        if not _NEW_RECORD.match(block, end + 1):
            return True
    return False


def line_starts(block: bytes) -> list[int]:
    """Byte offset of the start of every line of `block`."""
    import numpy as np

    newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
    return [0, *(newlines + 1).tolist()]


def _unbox(block: bytes) -> bytes:
    """Box lines lose their borders. A box line continues on the next one when the next line's
    first word would not have fitted in the space left before the border: that is why the
    printer wrapped there (such lines are marked for joining)."""
    lines = block.split(b"\n")
    boxes = [_BOX.match(line) if b"\xe2" in line else None for line in lines]
    for index, box in enumerate(boxes):
        if box is None:
            continue
        text = box.group(1)
        following = boxes[index + 1] if index + 1 < len(boxes) else None
        mark = b""
        if following is not None and text.strip():
            word = following.group(1).split(b" ", 1)[0]
            if word and len(word) + 2 > len(box.group("pad")):
                # rich folds a word wider than the box (Text overflow "fold"): the line is that
                # one word, right up to the border's padding space.
                folded = len(box.group("pad")) <= 1 and b" " not in text.strip()
                mark = _FOLD if folded else _FULL
        lines[index] = text + mark
    return b"\n".join(lines)


def _join_wrapped(block: bytes) -> bytes:
    """Join wrapped and split lines; the continuation lines are left empty."""
    lines = block.split(b"\n")
    out: list[bytes] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        joined = 0
        while index + joined + 1 < len(lines):
            nxt = lines[index + joined + 1]
            how = _continues(line, nxt)
            if how is None:
                break
            line = line.replace(_FULL, b"").replace(_FOLD, b"")
            if how == "word":
                line = line.rstrip() + b" " + nxt.lstrip()
            else:
                line = line + (nxt.lstrip() if how == "fold" else nxt)
            joined += 1
        if _FULL in line or _FOLD in line:
            line = line.replace(_FULL, b"").replace(_FOLD, b"")
        out.append(line)
        out.extend(b"" for _ in range(joined))
        index += joined + 1
    return b"\n".join(out)


def _width(line: bytes) -> int:
    try:
        return len(line.decode("utf-8"))
    except UnicodeDecodeError:
        return len(line)


def _continues(line: bytes, nxt: bytes) -> str | None:
    """How `nxt` continues `line`: "word" (join with a space), "wrap" (join as is) or None."""
    if not nxt.strip() or _NEW_RECORD.match(nxt):
        return None
    if line.endswith(_FULL):
        return "word"  # pretty printers wrap at word boundaries and drop the space
    if line.endswith(_FOLD):
        return "fold"  # a word folded at the border goes on without a space
    if line.endswith(b" ") and not line.endswith(b"  ") and len(line) > 20:
        return "word"  # a message split after a word by the program or the paste
    if (
        line[-1:] not in (b" ", b"\t")
        and line[-3:-1] not in _BOX_DRAWING  # a box's border 80 wide is not a wrapped line
        and _width(line) in WRAP_WIDTHS
    ):
        return "wrap"
    return None


RankSpan = tuple[str, int, int]  # ("number" | "name", start, end) of the rank in the line


def split_spans(raw: bytes) -> tuple[int, int, RankSpan | None]:
    """Where the message of `raw` starts and ends once its prefixes and right padding are removed,
    and where the rank they name is (None when none does). Offsets into `raw`; split_prefix
    reads them. Prefix patterns tell digits apart only by '\\d' and digit counts, so a line with
    its digits changed has the same spans (shapes.py relies on it)."""
    rank: RankSpan | None = None
    start = 0
    body = raw
    for _ in range(_MAX_PREFIXES):
        if not body:
            break
        pattern = _PREFIX_BY_START.get(body[0])
        if pattern is None:
            # A word: only host-style prefixes, which all hold a ':' early on.
            if b":" not in body[:80]:
                break
            pattern = _WORDY_PREFIX
        match = pattern.match(body)
        if match is None or match.end() == 0:
            break
        if rank is None:
            for group in ("r_torchrun", "r_mpi", "r_srun", "r_torchx"):
                if group in pattern.groupindex and match.start(group) >= 0:
                    # ten digits or more is not a rank (and int() refuses 4300 digits and more)
                    if match.end(group) - match.start(group) <= _MAX_RANK_DIGITS:
                        rank = ("number", start + match.start(group), start + match.end(group))
                    break
            else:
                if "k8s" in pattern.groupindex and match.start("k8s") < match.end("k8s"):
                    rank = ("name", start + match.start("k8s"), start + match.end("k8s"))
        start += match.end()
        body = body[match.end() :]
    return start, start + len(body.rstrip(b" \t")), rank


def rank_of(raw: bytes, rank: RankSpan | None) -> int | str | None:
    """The rank a span of split_spans names in `raw`."""
    if rank is None:
        return None
    kind, start, end = rank
    if kind == "number":
        return int(raw[start:end])
    return raw[start:end].decode("ascii", "replace")


def split_prefix(raw: bytes) -> tuple[int | str | None, bytes]:
    """(rank named by the prefixes or None, the message without them and its right padding)."""
    start, end, rank = split_spans(raw)
    return rank_of(raw, rank), raw[start:end]
