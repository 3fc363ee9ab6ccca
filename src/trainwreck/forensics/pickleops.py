"""The data-only pickle interpreter fastread reads headers, irregular entries and the rows the
report shows with: containers, scalars and the memo, on the C unpickler's terms
(CPython Modules/_pickle.c). No opcode that names, builds or calls anything exists in it: GLOBAL,
STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ and persistent ids give up, and SafeUnpickler then
reads (and refuses) the file as before."""

from __future__ import annotations

import struct
from typing import Any

MAX_OPS = 60_000  # opcodes interpreted in all (a header of thousands of groups)


class _GiveUp(Exception):
    """Not a stream this reader takes: the caller uses SafeUnpickler."""


class _Slot:
    """A payload's place in a template entry, pushed instead of its value."""

    __slots__ = ("at", "kind", "width")

    def __init__(self, kind: int, at: int, width: int) -> None:
        self.kind, self.at, self.width = kind, at, width


_UNPACK_I = struct.Struct("<i").unpack_from
_UNPACK_L = struct.Struct("<I").unpack_from
_UNPACK_Q = struct.Struct("<Q").unpack_from
_UNPACK_D = struct.Struct(">d").unpack_from
# Opcodes that start a value (an element of the entries list can begin with one of them).
_STARTS = frozenset(b"}])\x8fKMJ\x8a\x8bGN\x88\x89X\x8c\x8dCB\x8ehj(")
_PUTS = frozenset(b"qr\x94")
_NOTHING = object()  # no pending value


class Interpreter:
    """The pickle opcodes of plain data, on the C unpickler's terms; anything else gives up."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.memo: dict[int, Any] = {}
        self.memo_count = 0  # slots the C unpickler would hold (MEMOIZE's next index)
        self.max_put = -1  # memo indices must rise: none is ever reused
        self.ops = 0
        self.slots: list[_Slot] | None = None  # template mode: payloads become _Slot
        self.write_memo = True
        self.end = 0  # where the last value() ended
        self.pending: Any = _NOTHING  # a value entries() read that was not an element

    # --- the interpreter -----------------------------------------------------------------------

    def _put(self, index: int, value: Any) -> None:
        if self.slots is not None or not self.write_memo:
            return
        if index <= self.max_put:
            raise _GiveUp("memo index reused")
        self.max_put = index
        self.memo_count += 1
        self.memo[index] = value

    def step(self, at: int, stack: list[Any], marks: list[int]) -> int:
        """Run the opcode at `at` on the stack; the position after it."""
        data = self.data
        op = data[at]
        at += 1
        self.ops += 1
        slots = self.slots
        fence = marks[-1] if marks else 0
        if op == 0x4B:  # BININT1
            stack.append(_Slot(op, at - 1, 1) if slots is not None else data[at])
            if slots is not None:
                slots.append(stack[-1])
            return at + 1
        if op == 0x4D:  # BININT2
            if at + 2 > len(data):
                raise _GiveUp("truncated")
            stack.append(
                _Slot(op, at - 1, 2) if slots is not None else data[at] | data[at + 1] << 8
            )
            if slots is not None:
                slots.append(stack[-1])
            return at + 2
        if op == 0x4A:  # BININT
            value = _UNPACK_I(data, at)[0]
            stack.append(_Slot(op, at - 1, 4) if slots is not None else value)
            if slots is not None:
                slots.append(stack[-1])
            return at + 4
        if op == 0x8A:  # LONG1
            n = data[at]
            payload = data[at + 1 : at + 1 + n]
            if len(payload) != n:
                raise _GiveUp("truncated")
            if slots is not None and 0 < n <= 8:
                stack.append(_Slot(op, at - 1, n))
                slots.append(stack[-1])
            else:
                stack.append(int.from_bytes(payload, "little", signed=True))
            return at + 1 + n
        if op == 0x47:  # BINFLOAT
            value = _UNPACK_D(data, at)[0]
            stack.append(_Slot(op, at - 1, 8) if slots is not None else value)
            if slots is not None:
                slots.append(stack[-1])
            return at + 8
        if op in (0x58, 0x8C, 0x8D, 0x43, 0x42, 0x8E):  # BINUNICODE, SHORT_, 8; BINBYTES ...
            if op in (0x58, 0x42):
                n, at = _UNPACK_L(data, at)[0], at + 4
            elif op in (0x8C, 0x43):
                n, at = data[at], at + 1
            else:
                n, at = _UNPACK_Q(data, at)[0], at + 8
            raw = data[at : at + n]
            if len(raw) != n:
                raise _GiveUp("truncated")
            stack.append(raw.decode("utf-8", "surrogatepass") if op in (0x58, 0x8C, 0x8D) else raw)
            return at + n
        if op == 0x68 or op == 0x6A:  # BINGET, LONG_BINGET
            if op == 0x68:
                index, at = data[at], at + 1
            else:
                index, at = _UNPACK_L(data, at)[0], at + 4
            stack.append(self.memo[index])  # KeyError: unknown, or a run's: give up
            return at
        if op == 0x71 or op == 0x72 or op == 0x94:  # BINPUT, LONG_BINPUT, MEMOIZE
            if len(stack) <= fence:
                raise _GiveUp("memo put on an empty stack")
            if op == 0x71:
                index, at = data[at], at + 1
            elif op == 0x72:
                index, at = _UNPACK_L(data, at)[0], at + 4
            else:
                index = self.memo_count
            if slots is not None:  # MEMOIZE: a place with no payload, counted per row
                width = {0x71: 1, 0x72: 4, 0x94: 0}[op]
                slots.append(_Slot(op, at - 1 - width, width))
            self._put(index, stack[-1])
            return at
        if op == 0x7D:  # EMPTY_DICT
            stack.append({})
        elif op == 0x5D:  # EMPTY_LIST
            stack.append([])
        elif op == 0x29:  # EMPTY_TUPLE
            stack.append(())
        elif op == 0x8F:  # EMPTY_SET
            stack.append(set())
        elif op == 0x4E:
            stack.append(None)
        elif op == 0x88:
            stack.append(True)
        elif op == 0x89:
            stack.append(False)
        elif op == 0x28:  # MARK
            marks.append(len(stack))
        elif op in (0x65, 0x75, 0x74, 0x6C, 0x64, 0x90, 0x91, 0x31):  # take the items to the mark
            if not marks:
                raise _GiveUp("no mark")
            start = marks.pop()
            items = stack[start:]
            del stack[start:]
            if op == 0x74:  # TUPLE
                stack.append(tuple(items))
            elif op == 0x6C:  # LIST
                stack.append(items)
            elif op == 0x91:  # FROZENSET
                stack.append(frozenset(items))
            elif op == 0x64:  # DICT
                if len(items) % 2:
                    raise _GiveUp("odd dict")
                stack.append(dict(zip(items[::2], items[1::2], strict=True)))
            elif op != 0x31:  # APPENDS, SETITEMS, ADDITEMS (POP_MARK drops them)
                if len(stack) <= (marks[-1] if marks else 0):
                    raise _GiveUp("no target")
                self._extend(op, stack[-1], items)
        elif op in (0x61, 0x73):  # APPEND, SETITEM
            width = 2 if op == 0x61 else 3
            if len(stack) - fence < width:
                raise _GiveUp("stack underflow")
            items = stack[len(stack) - width + 1 :]
            del stack[len(stack) - width + 1 :]
            self._extend(0x65 if op == 0x61 else 0x75, stack[-1], items)
        elif op in (0x85, 0x86, 0x87):  # TUPLE1-3
            width = op - 0x84
            if len(stack) - fence < width:
                raise _GiveUp("stack underflow")
            items = stack[len(stack) - width :]
            del stack[len(stack) - width :]
            stack.append(tuple(items))
        elif op == 0x30:  # POP
            if marks and marks[-1] == len(stack):
                marks.pop()
            elif len(stack) > fence:
                stack.pop()
            else:
                raise _GiveUp("stack underflow")
        elif op == 0x32:  # DUP
            if len(stack) <= fence:
                raise _GiveUp("stack underflow")
            stack.append(stack[-1])
        elif op == 0x95:  # FRAME: a length only
            return at + 8
        elif op == 0x80:  # PROTO
            if not 2 <= data[at] <= 5:
                raise _GiveUp("protocol")
            return at + 1
        else:  # STOP is the caller's; GLOBAL, REDUCE, BUILD, ...: SafeUnpickler words it
            raise _GiveUp(f"opcode {op:#x}")
        return at

    @staticmethod
    def _extend(op: int, target: Any, items: list[Any]) -> None:
        if op == 0x65 and type(target) is list:
            target.extend(items)
        elif op == 0x75 and type(target) is dict and not len(items) % 2:
            for k in range(0, len(items), 2):
                target[items[k]] = items[k + 1]
        elif op == 0x90 and type(target) is set:
            target.update(items)
        else:
            raise _GiveUp("append to what the C unpickler would treat otherwise")

    def value(self, at: int, end: int | None = None, *, write_memo: bool = True) -> Any:
        """One complete value from `at` on a stack of its own (underflow: give up); with `end`,
        it must take exactly the bytes to `end`, trailing memo puts included."""
        stack: list[Any] = []
        marks: list[int] = []
        self.write_memo = write_memo
        try:
            while True:
                if self.ops > MAX_OPS:
                    raise _GiveUp("too many opcodes")
                at = self.step(at, stack, marks)
                if len(stack) == 1 and not marks:
                    while at < len(self.data) and self.data[at] in _PUTS:
                        at = self.step(at, stack, marks)
                    if self.data[at : at + 1] == b"(":
                        continue  # MARK ... SETITEMS / APPENDS fill the value just made
                    if end is not None and at != end:
                        raise _GiveUp("row length")
                    self.end = at
                    return stack[0]
        finally:
            self.write_memo = True
