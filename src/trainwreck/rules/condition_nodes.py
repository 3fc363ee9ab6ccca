"""The condition tree: one node class per construct of the condition language (condition.py).

Boolean nodes (`Condition`) answer `holds(ctx)`, number nodes (`Expression`) give `value(ctx)`:
evaluation dispatches on the node's class. Each node has a JSON form (`to_json`), a list whose
first item is the node's tag, which the compiled bundle stores; `from_json` reads it back.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from trainwreck.rules.condition import Context


# --- the tree ----------------------------------------------------------------------------------


class Node:
    """A node of a parsed condition. `tag` names it in the JSON form."""

    tag: ClassVar[str]

    def children(self) -> tuple[Node, ...]:
        return ()

    def to_json(self) -> list[Any]:
        raise NotImplementedError


class Condition(Node):
    """A boolean node. `holds` answers for the whole log; `each` answers match by match inside
    `NAME where (...)`: a bool for every match of NAME (an array), or one bool for all of them
    (a part's truth, a detector's output, a constant), which numpy broadcasts."""

    def holds(self, ctx: Context) -> bool:
        raise NotImplementedError

    def each(self, ctx: Context) -> Any:
        raise NotImplementedError


class Expression(Node):
    """A number node: a scalar, or one value per match of a matcher (a numpy array)."""

    def value(self, ctx: Context) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Or(Condition):
    tag = "or"
    items: tuple[Condition, ...]

    def children(self) -> tuple[Node, ...]:
        return self.items

    def holds(self, ctx: Context) -> bool:
        return any(item.holds(ctx) for item in self.items)

    def each(self, ctx: Context) -> Any:
        return functools.reduce(np.logical_or, (item.each(ctx) for item in self.items))

    def to_json(self) -> list[Any]:
        return [self.tag, [item.to_json() for item in self.items]]


@dataclass(frozen=True)
class And(Condition):
    tag = "and"
    items: tuple[Condition, ...]

    def children(self) -> tuple[Node, ...]:
        return self.items

    def holds(self, ctx: Context) -> bool:
        return all(item.holds(ctx) for item in self.items)

    def each(self, ctx: Context) -> Any:
        return functools.reduce(np.logical_and, (item.each(ctx) for item in self.items))

    def to_json(self) -> list[Any]:
        return [self.tag, [item.to_json() for item in self.items]]


@dataclass(frozen=True)
class Not(Condition):
    tag = "not"
    item: Condition

    def children(self) -> tuple[Node, ...]:
        return (self.item,)

    def holds(self, ctx: Context) -> bool:
        return not self.item.holds(ctx)

    def each(self, ctx: Context) -> Any:
        return np.logical_not(self.item.each(ctx))

    def to_json(self) -> list[Any]:
        return [self.tag, self.item.to_json()]


@dataclass(frozen=True)
class NOf(Condition):
    """`N of (a, b, ...)`: at least `needed` of the items hold."""

    tag = "nof"
    needed: int
    items: tuple[Condition, ...]

    def children(self) -> tuple[Node, ...]:
        return self.items

    def holds(self, ctx: Context) -> bool:
        hits = 0
        for item in self.items:
            hits += bool(item.holds(ctx))
            if hits >= self.needed:
                return True
        return False

    def each(self, ctx: Context) -> Any:
        hits = sum(np.asarray(item.each(ctx), dtype=np.int64) for item in self.items)
        return np.greater_equal(hits, self.needed)

    def to_json(self) -> list[Any]:
        return [self.tag, self.needed, [item.to_json() for item in self.items]]


@dataclass(frozen=True)
class Bool(Condition):
    tag = "bool"
    constant: bool

    def holds(self, ctx: Context) -> bool:
        return self.constant

    def each(self, ctx: Context) -> Any:
        return self.constant

    def to_json(self) -> list[Any]:
        return [self.tag, self.constant]


@dataclass(frozen=True)
class Name(Condition):
    """A matcher that matched, or a detector that fired."""

    tag = "name"
    name: str

    def holds(self, ctx: Context) -> bool:
        return ctx.truth(self.name)

    def each(self, ctx: Context) -> Any:
        return ctx.truth(self.name)

    def to_json(self) -> list[Any]:
        return [self.tag, self.name]


_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
}


@dataclass(frozen=True)
class Compare(Condition):
    """Numbers compared; over a matcher's values it holds when any single match satisfies it."""

    tag = "cmp"
    op: str
    left: Expression
    right: Expression

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def holds(self, ctx: Context) -> bool:
        return bool(np.any(self.each(ctx)))

    def each(self, ctx: Context) -> Any:
        with np.errstate(all="ignore"):
            return _CMP[self.op](self.left.value(ctx), self.right.value(ctx))

    def to_json(self) -> list[Any]:
        return [self.tag, self.op, self.left.to_json(), self.right.to_json()]


@dataclass(frozen=True)
class Num(Expression):
    tag = "num"
    number: float

    def value(self, ctx: Context) -> Any:
        return self.number

    def to_json(self) -> list[Any]:
        return [self.tag, self.number]


@dataclass(frozen=True)
class Str(Node):
    """A string literal: only ever the right side of a StrEq (the parser checks)."""

    tag = "str"
    text: str

    def to_json(self) -> list[Any]:
        return [self.tag, self.text]


@dataclass(frozen=True)
class Count(Expression):
    """count(NAME): a matcher's matches, or a detector's `count` output."""

    tag = "count"
    name: str

    def value(self, ctx: Context) -> Any:
        return ctx.count(self.name)

    def to_json(self) -> list[Any]:
        return [self.tag, self.name]


@dataclass(frozen=True)
class Attr(Expression):
    """NAME.FIELD: a matcher's capture (one value per match) or a detector's output."""

    tag = "attr"
    part: str
    field: str

    def value(self, ctx: Context) -> Any:
        return ctx.numbers(self.part, self.field)

    def to_json(self) -> list[Any]:
        return [self.tag, self.part, self.field]


@dataclass(frozen=True)
class StrEq(Condition):
    """A capture compared with a string literal (== or !=), over every match."""

    tag = "streq"
    op: str
    attr: Attr
    text: str

    def children(self) -> tuple[Node, ...]:
        return (self.attr,)

    def holds(self, ctx: Context) -> bool:
        values = ctx.strings(self.attr.part, self.attr.field)
        if self.op == "==":
            return any(value == self.text for value in values)
        return any(value != self.text for value in values)

    def each(self, ctx: Context) -> Any:
        values = ctx.strings(self.attr.part, self.attr.field)
        same = np.array([value == self.text for value in values], dtype=bool)
        return same if self.op == "==" else np.logical_not(same)

    def to_json(self) -> list[Any]:
        return [self.tag, self.op, self.attr.to_json(), self.text]


@dataclass(frozen=True)
class Where(Condition):
    """`NAME where (...)`: some single match of matcher NAME satisfies every test inside at once
    (outside it, each comparison may hold on a different match)."""

    tag = "where"
    name: str
    item: Condition

    def children(self) -> tuple[Node, ...]:
        return (self.item,)

    def holds(self, ctx: Context) -> bool:
        return ctx.truth(self.name) and bool(np.any(self.item.each(ctx)))

    def each(self, ctx: Context) -> Any:  # the parser keeps `where` from nesting
        return self.holds(ctx)

    def to_json(self) -> list[Any]:
        return [self.tag, self.name, self.item.to_json()]


@dataclass(frozen=True)
class Neg(Expression):
    tag = "neg"
    item: Expression

    def children(self) -> tuple[Node, ...]:
        return (self.item,)

    def value(self, ctx: Context) -> Any:
        return -self.item.value(ctx)

    def to_json(self) -> list[Any]:
        return [self.tag, self.item.to_json()]


@dataclass(frozen=True)
class Arith(Expression):
    """+ - * /; a division by zero gives NaN (which satisfies no comparison)."""

    tag = "bin"
    op: str
    left: Expression
    right: Expression

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def value(self, ctx: Context) -> Any:
        left = self.left.value(ctx)
        right = self.right.value(ctx)
        if self.op == "+":
            return left + right
        if self.op == "-":
            return left - right
        if self.op == "*":
            return left * right
        divisor = np.asarray(right, dtype=float)
        divisor = np.where(divisor == 0, math.nan, divisor)
        return np.asarray(left, dtype=float) / divisor

    def to_json(self) -> list[Any]:
        return [self.tag, self.op, self.left.to_json(), self.right.to_json()]


def from_json(data: Any) -> Node:
    """A tree from its JSON form (as the compiled bundle stores it); ValueError when malformed."""
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ValueError(f"not a condition node: {data!r}")
    tag, *rest = data
    if tag in ("or", "and"):
        items = tuple(_condition(item) for item in rest[0])
        return Or(items) if tag == "or" else And(items)
    if tag == "not":
        return Not(_condition(rest[0]))
    if tag == "nof":
        return NOf(int(rest[0]), tuple(_condition(item) for item in rest[1]))
    if tag == "bool":
        return Bool(bool(rest[0]))
    if tag == "name":
        return Name(str(rest[0]))
    if tag == "where":
        return Where(str(rest[0]), _condition(rest[1]))
    if tag == "cmp":
        return Compare(str(rest[0]), _expression(rest[1]), _expression(rest[2]))
    if tag == "streq":
        attr = from_json(rest[1])
        if not isinstance(attr, Attr):
            raise ValueError(f"not a capture: {rest[1]!r}")
        return StrEq(str(rest[0]), attr, str(rest[2]))
    if tag == "num":
        return Num(rest[0])
    if tag == "str":
        return Str(str(rest[0]))
    if tag == "count":
        return Count(str(rest[0]))
    if tag == "attr":
        return Attr(str(rest[0]), str(rest[1]))
    if tag == "neg":
        return Neg(_expression(rest[0]))
    if tag == "bin":
        return Arith(str(rest[0]), _expression(rest[1]), _expression(rest[2]))
    raise ValueError(f"not a condition node: {tag}")


def _condition(data: Any) -> Condition:
    node = from_json(data)
    if not isinstance(node, Condition):
        raise ValueError(f"not a condition: {data!r}")
    return node


def _expression(data: Any) -> Expression:
    node = from_json(data)
    if not isinstance(node, Expression):
        raise ValueError(f"not a number: {data!r}")
    return node


def as_tree(tree: Node | list[Any]) -> Node:
    return tree if isinstance(tree, Node) else from_json(tree)
