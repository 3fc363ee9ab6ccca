"""The condition language: a small hand-written recursive-descent parser and its evaluator.

Grammar (lowest precedence first):

    expr    := and_ ('or' and_)*
    and_    := not_ ('and' not_)*
    not_    := 'not' not_ | compare
    compare := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?
    sum     := product (('+' | '-') product)*
    product := unary (('*' | '/') unary)*
    unary   := '-' unary | atom
    atom    := NUMBER [UNIT] | STRING | 'true' | 'false'
             | INT 'of' '(' expr (',' expr)* ')'
             | 'count' '(' NAME ')'
             | NAME ['.' FIELD]
             | NAME 'where' '(' expr ')'
             | '(' expr ')'

Nothing is ever evaluated as Python. The parse result is a tree of node classes (below): boolean
nodes answer `holds(ctx)`, number nodes `value(ctx)`; evaluation dispatches on the node's class.
Each node has a JSON form (`to_json`, read back by `from_json`): a list whose first item names
the node, which the compiled bundle stores, so the engine never re-parses. Types are checked while parsing:
a condition is boolean; arithmetic is over numbers; one comparison uses captures of at most one
matcher (a comparison holds when any single match satisfies it); `NAME where (...)` holds when one
single match of matcher NAME satisfies everything inside, which reads captures of NAME only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from trainwreck.rules.condition_nodes import (
    And,
    Arith,
    Attr,
    Bool,
    Compare,
    Condition,
    Count,
    Name,
    Neg,
    Node,
    NOf,
    Not,
    Num,
    Or,
    Str,
    StrEq,
    Where,
    as_tree,
    from_json,
)
from trainwreck.rules.units import FACTORS

KEYWORDS = frozenset({"and", "or", "not", "of", "count", "true", "false", "where"})
COMPARE_OPS = ("<=", ">=", "==", "!=", "<", ">")
MAX_LENGTH = 4000
MAX_DEPTH = 60


class Context(Protocol):
    """What evaluation reads: the rule's matchers and detectors after the scan."""

    def truth(self, name: str) -> bool: ...

    def count(self, name: str) -> float: ...

    def numbers(self, part: str, field: str) -> np.ndarray | float: ...

    def strings(self, part: str, field: str) -> list[str]: ...


class ConditionError(Exception):
    """A problem in a condition; `offset` is the 0-based character offset in the source."""

    def __init__(self, offset: int, message: str):
        super().__init__(message)
        self.offset = offset
        self.message = message


class Scope(Protocol):
    """What the parser needs to know about the rule's parts."""

    def kind(self, name: str) -> str | None:
        """'matcher', 'detector', 'series' or None."""

    def field_problem(self, name: str, field: str) -> str | None:
        """Why `name.field` is not valid, or None when it is."""


@dataclass
class Token:
    kind: str  # num, str, name, op, end
    text: str
    offset: int
    value: Any = None


def tokenize(source: str) -> list[Token]:
    if len(source) > MAX_LENGTH:
        raise ConditionError(MAX_LENGTH, f"condition longer than {MAX_LENGTH} characters")
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        if ch.isdigit() or (ch == "." and i + 1 < n and source[i + 1].isdigit()):
            while i < n and (source[i].isdigit() or source[i] == "."):
                i += 1
            if (
                i < n
                and source[i] in "eE"
                and i + 1 < n
                and (source[i + 1].isdigit() or source[i + 1] in "+-")
            ):
                i += 2
                while i < n and source[i].isdigit():
                    i += 1
            number_text = source[start:i]
            try:
                value = float(number_text)
            except ValueError:
                raise ConditionError(start, f"malformed number '{number_text}'") from None
            unit_start = i
            while i < n and (source[i].isalpha() or source[i] == "µ"):
                i += 1
            unit = source[unit_start:i]
            if unit:
                if unit not in FACTORS or unit in ("number",):
                    raise ConditionError(
                        unit_start,
                        f"unknown unit '{unit}' (times: ns us ms s min h; sizes: B KiB MiB GiB TiB KB MB GB TB)",
                    )
                value *= FACTORS[unit]
            tokens.append(Token("num", source[start:i], start, value))
            continue
        if ch.isalpha() or ch == "_":
            while i < n and (source[i].isalnum() or source[i] == "_"):
                i += 1
            tokens.append(Token("name", source[start:i], start))
            continue
        if ch in "'\"":
            quote = ch
            i += 1
            chars: list[str] = []
            while i < n and source[i] != quote:
                if source[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(source[i])
                i += 1
            if i >= n:
                raise ConditionError(start, "unterminated string")
            i += 1
            tokens.append(Token("str", source[start:i], start, "".join(chars)))
            continue
        two = source[i : i + 2]
        if two in ("<=", ">=", "==", "!="):
            tokens.append(Token("op", two, start))
            i += 2
            continue
        if ch in "<>+-*/(),.":
            tokens.append(Token("op", ch, start))
            i += 1
            continue
        if ch == "=":
            raise ConditionError(start, "use '==' to compare")
        if ch in "&|!":
            word = {"&": "and", "|": "or", "!": "not"}[ch]
            raise ConditionError(start, f"unexpected '{ch}': write '{word}'")
        raise ConditionError(start, f"unexpected character '{ch}'")
    tokens.append(Token("end", "", n))
    return tokens


@dataclass
class _Typed:
    node: Node
    type: str  # bool | num | str | nums (captures of a matcher: one value per match) | strs
    matcher: str | None = None  # the matcher whose captures this expression reads
    offset: int = 0


class Parser:
    def __init__(self, source: str, scope: Scope):
        self.source = source
        self.scope = scope
        self.tokens = tokenize(source)
        self.pos = 0
        self.depth = 0
        self.names: set[str] = set()
        self.within: str | None = None  # the matcher of the `where` being parsed

    # -- helpers
    def peek(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.peek()
        if token.kind == kind and (text is None or token.text == text):
            self.pos += 1
            return token
        return None

    def expect(self, kind: str, text: str, what: str) -> Token:
        token = self.accept(kind, text)
        if token is None:
            found = self.peek()
            shown = "end of condition" if found.kind == "end" else f"'{found.text}'"
            raise ConditionError(found.offset, f"expected {what}, found {shown}")
        return token

    def keyword(self, word: str) -> Token | None:
        token = self.peek()
        if token.kind == "name" and token.text == word:
            self.pos += 1
            return token
        return None

    # -- grammar
    def parse(self) -> Condition:
        if self.peek().kind == "end":
            raise ConditionError(0, "empty condition")
        result = self.expr()
        token = self.peek()
        if token.kind != "end":
            raise ConditionError(
                token.offset, f"unexpected '{token.text}' after a complete condition"
            )
        return self.as_bool(result).node

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ConditionError(
                self.peek().offset, f"condition nests deeper than {MAX_DEPTH} levels"
            )

    def as_bool(self, typed: _Typed) -> _Typed:
        if typed.type == "bool":
            return typed
        raise ConditionError(
            typed.offset,
            "expected a condition (a part name, a comparison or 'N of (...)'), found a "
            + {"num": "number", "nums": "number", "str": "string", "strs": "string"}[typed.type],
        )

    def expr(self) -> _Typed:
        self.nest()
        first = self.and_()
        items = [first]
        while self.keyword("or"):
            items.append(self.as_bool(self.and_()))
        self.depth -= 1
        if len(items) == 1:
            return first
        self.as_bool(first)
        return _Typed(Or(tuple(item.node for item in items)), "bool", offset=first.offset)

    def and_(self) -> _Typed:
        first = self.not_()
        items = [first]
        while self.keyword("and"):
            items.append(self.as_bool(self.not_()))
        if len(items) == 1:
            return first
        self.as_bool(first)
        return _Typed(And(tuple(item.node for item in items)), "bool", offset=first.offset)

    def not_(self) -> _Typed:
        token = self.keyword("not")
        if token:
            self.nest()
            inner = self.as_bool(self.not_())
            self.depth -= 1
            return _Typed(Not(inner.node), "bool", offset=token.offset)
        return self.compare()

    def compare(self) -> _Typed:
        left = self.sum()
        token = self.peek()
        if token.kind == "op" and token.text in COMPARE_OPS:
            self.pos += 1
            right = self.sum()
            following = self.peek()
            if following.kind == "op" and following.text in COMPARE_OPS:
                raise ConditionError(
                    following.offset, "comparisons cannot be chained; join them with 'and'"
                )
            return self.comparison(token, left, right)
        return left

    def comparison(self, op: Token, left: _Typed, right: _Typed) -> _Typed:
        for side in (left, right):
            if side.type == "bool":
                raise ConditionError(side.offset, f"cannot compare a condition with '{op.text}'")
        if left.matcher and right.matcher and left.matcher != right.matcher:
            raise ConditionError(
                right.offset,
                f"one comparison may use captures of one matcher only ('{left.matcher}' and '{right.matcher}'); "
                "compare each separately and join with 'and'",
            )
        textual = {left.type, right.type} & {"str", "strs"}
        if textual:
            if op.text not in ("==", "!="):
                raise ConditionError(
                    op.offset, f"strings can only be compared with == or != (not '{op.text}')"
                )
            if left.type == "str" and right.type == "str":
                raise ConditionError(
                    left.offset, "comparing two string literals is always the same"
                )
            # A capture compared with a string literal: compare texts.
            field, literal = (left, right) if right.type == "str" else (right, left)
            if literal.type != "str" or not isinstance(field.node, Attr):
                raise ConditionError(
                    op.offset,
                    'compare a capture with a quoted string, e.g. exc.name == "OutOfMemoryError"',
                )
            return _Typed(StrEq(op.text, field.node, literal.node.text), "bool", offset=left.offset)
        return _Typed(Compare(op.text, left.node, right.node), "bool", offset=left.offset)

    def arith(self, op: Token, left: _Typed, right: _Typed) -> _Typed:
        for side in (left, right):
            if side.type not in ("num", "nums"):
                what = "a condition" if side.type == "bool" else "a string"
                raise ConditionError(side.offset, f"'{op.text}' needs numbers, not {what}")
        if left.matcher and right.matcher and left.matcher != right.matcher:
            raise ConditionError(
                right.offset,
                f"arithmetic may use captures of one matcher only ('{left.matcher}' and '{right.matcher}')",
            )
        matcher = left.matcher or right.matcher
        kind = "nums" if "nums" in (left.type, right.type) else "num"
        return _Typed(Arith(op.text, left.node, right.node), kind, matcher, left.offset)

    def sum(self) -> _Typed:
        return self.chain("+-", self.product)

    def product(self) -> _Typed:
        return self.chain("*/", self.unary)

    def chain(self, ops: str, operand: Callable[[], _Typed]) -> _Typed:
        """`operand (op operand)*`, left-associative: each operator nests the tree one level
        deeper, and every later stage walks it recursively, so each one counts towards
        MAX_DEPTH."""
        left = operand()
        levels = 0
        try:
            while True:
                token = self.peek()
                if token.kind != "op" or token.text not in ops:
                    return left
                self.pos += 1
                self.nest()
                levels += 1
                left = self.arith(token, left, operand())
        finally:
            self.depth -= levels

    def unary(self) -> _Typed:
        token = self.accept("op", "-")
        if token:
            self.nest()
            try:
                inner = self.unary()
            finally:
                self.depth -= 1
            if inner.type not in ("num", "nums"):
                raise ConditionError(token.offset, "'-' needs a number")
            return _Typed(Neg(inner.node), inner.type, inner.matcher, token.offset)
        return self.atom()

    def atom(self) -> _Typed:
        token = self.peek()
        if token.kind == "end":
            raise ConditionError(token.offset, "condition ends too early")
        if token.kind == "num":
            self.pos += 1
            if self.keyword("of"):
                return self.n_of(token)
            return _Typed(Num(token.value), "num", offset=token.offset)
        if token.kind == "str":
            self.pos += 1
            return _Typed(Str(token.value), "str", offset=token.offset)
        if token.kind == "op" and token.text == "(":
            self.pos += 1
            inner = self.expr()
            self.expect("op", ")", "')'")
            inner.offset = token.offset
            return inner
        if token.kind == "name":
            return self.name_atom()
        raise ConditionError(token.offset, f"unexpected '{token.text}'")

    def n_of(self, number: Token) -> _Typed:
        value = number.value
        if value != int(value) or value < 1 or not number.text.isdigit():
            raise ConditionError(number.offset, "'N of (...)' needs a whole number N >= 1")
        self.expect("op", "(", "'(' after 'of'")
        items = [self.as_bool(self.expr()).node]
        while self.accept("op", ","):
            items.append(self.as_bool(self.expr()).node)
        self.expect("op", ")", "')' or ','")
        if int(value) > len(items):
            raise ConditionError(
                number.offset,
                f"'{int(value)} of' needs at least {int(value)} conditions, found {len(items)}",
            )
        return _Typed(NOf(int(value), tuple(items)), "bool", offset=number.offset)

    def name_atom(self) -> _Typed:
        token = self.next()
        name = token.text
        if name in ("true", "false"):
            return _Typed(Bool(name == "true"), "bool", offset=token.offset)
        if name == "count":
            if not self.accept("op", "("):
                raise ConditionError(token.offset, "'count' is reserved: write count(NAME)")
            target = self.next()
            if target.kind != "name":
                raise ConditionError(target.offset, "count(...) takes a matcher or detector name")
            self.resolve(target, allow=("matcher", "detector"))
            self.expect("op", ")", "')'")
            return _Typed(Count(target.text), "num", offset=token.offset)
        if name in KEYWORDS:
            raise ConditionError(token.offset, f"unexpected keyword '{name}'")
        kind = self.resolve(token, allow=("matcher", "detector"))
        if self.accept("op", "."):
            field = self.next()
            if field.kind != "name":
                raise ConditionError(
                    field.offset, f"expected a capture or output name after '{name}.'"
                )
            problem = self.scope.field_problem(name, field.text)
            if problem:
                raise ConditionError(field.offset, problem)
            if kind == "matcher":
                if self.within is not None and name != self.within:
                    raise ConditionError(
                        token.offset,
                        f"inside '{self.within} where (...)' only captures of '{self.within}' "
                        f"are read, one match at a time; test '{name}' outside it",
                    )
                return _Typed(Attr(name, field.text), "nums", name, token.offset)
            return _Typed(Attr(name, field.text), "num", None, token.offset)
        where = self.keyword("where")
        if where is not None:
            return self.where(token, kind, where)
        return _Typed(Name(name), "bool", offset=token.offset)

    def where(self, token: Token, kind: str, where: Token) -> _Typed:
        if kind != "matcher":
            raise ConditionError(
                token.offset, f"'where' follows a matcher; '{token.text}' is a {kind}"
            )
        if self.within is not None:
            raise ConditionError(where.offset, "'where' cannot be nested")
        self.expect("op", "(", "'(' after 'where'")
        self.nest()
        self.within = token.text
        try:
            inner = self.as_bool(self.expr())
        finally:
            self.within = None
            self.depth -= 1
        self.expect("op", ")", "')'")
        return _Typed(Where(token.text, inner.node), "bool", offset=token.offset)

    def resolve(self, token: Token, allow: Sequence[str]) -> str:
        kind = self.scope.kind(token.text)
        if kind is None:
            raise ConditionError(token.offset, f"unknown name '{token.text}'")
        if kind not in allow:
            raise ConditionError(
                token.offset,
                f"'{token.text}' is a {kind}; a condition names matchers and detectors",
            )
        self.names.add(token.text)
        return kind


def parse(source: str, scope: Scope) -> tuple[Condition, set[str]]:
    """Parse and type-check a condition. Returns the tree and the part names it uses."""
    parser = Parser(source, scope)
    return parser.parse(), parser.names


def _walk(node: Node, visit: Callable[[Node], bool]) -> None:
    """Visit every node of a tree; `visit` returns True to stop descending."""
    if visit(node):
        return
    for child in node.children():
        _walk(child, visit)


def referenced_fields(tree: Node | list[Any]) -> set[tuple[str, str]]:
    """(part, field) pairs read by the tree (the engine keeps those captures' values); the tree
    or its JSON form."""
    found: set[tuple[str, str]] = set()

    def visit(node: Node) -> bool:
        if isinstance(node, Attr):
            found.add((node.part, node.field))
            return True
        return False

    _walk(as_tree(tree), visit)
    return found


def referenced_names(tree: Node | list[Any]) -> set[str]:
    """The matchers and detectors the tree names; the tree or its JSON form."""
    found: set[str] = set()

    def visit(node: Node) -> bool:
        if isinstance(node, (Name, Count)):
            found.add(node.name)
            return True
        if isinstance(node, Where):
            found.add(node.name)
            return False  # and what it reads inside
        if isinstance(node, Attr):
            found.add(node.part)
            return True
        return False

    _walk(as_tree(tree), visit)
    return found


def evaluate(tree: Node | list[Any], ctx: Context) -> bool:
    """Evaluate a parsed condition (the tree or its JSON form). Comparisons over a matcher's
    values hold when any single match satisfies them."""
    node = as_tree(tree)
    if not isinstance(node, Condition):
        raise ValueError(f"not a condition node: {node.tag}")
    return bool(node.holds(ctx))


__all__ = [
    "Condition",
    "ConditionError",
    "Context",
    "Node",
    "Scope",
    "evaluate",
    "from_json",
    "parse",
    "referenced_fields",
    "referenced_names",
    "tokenize",
]
