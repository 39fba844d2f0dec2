"""A tiny integer expression language for launch configurations in manifests.

Grid and block sizes, dynamic shared memory, compile-time defines and scalar
kernel arguments may be small arithmetic over the argument vocabulary, e.g.
``ceil_div(num_bags * 32, 256)``. The text comes from a submission, so it is
parsed by the hand-written recursive-descent parser below and evaluated over a
dictionary of integers; nothing is ever passed to ``eval``.

Grammar (whitespace between tokens is ignored)::

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/" | "//" | "%") unary)*
    unary   := ("-" | "+") unary | primary
    primary := INTEGER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"

Integers are unbounded Python integers; ``/`` and ``//`` are both floor
division (C's ``/`` on the non-negative values launch arithmetic uses), ``%``
is the matching modulo; dividing by zero is an error. Functions:
``min(a, b, ...)``, ``max(a, b, ...)``, ``ceil_div(a, b)``, ``gcd(a, b)``,
``next_power_of_2(a)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MAX_LENGTH = 256
"""Longest expression text accepted."""
MAX_DEPTH = 32
"""Deepest nesting accepted (parentheses, unary signs, calls)."""

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>//|[-+*/%(),]))")


class ExpressionError(ValueError):
    """An expression that does not parse, or cannot be evaluated."""


@dataclass(frozen=True)
class Token:
    """One lexical token."""

    kind: str
    """``int``, ``name``, ``op`` or ``end``."""
    text: str
    """The token's text."""
    pos: int
    """0-based column in the expression."""


def _ceil_div(a: int, b: int) -> int:
    if b == 0:
        raise ExpressionError("ceil_div by zero")
    return -(-a // b)


def _next_power_of_2(a: int) -> int:
    """Smallest power of two >= a (1 for a <= 1): Triton's block sizes."""
    return 1 if a <= 1 else 1 << (a - 1).bit_length()


FUNCTIONS: dict[str, tuple[int, int | None, Callable[..., int]]] = {
    "min": (2, None, min),
    "max": (2, None, max),
    "ceil_div": (2, 2, _ceil_div),
    "gcd": (2, 2, math.gcd),
    "next_power_of_2": (1, 1, _next_power_of_2),
}
"""name -> (fewest arguments, most arguments or None, implementation)."""


def tokenize(text: str) -> list[Token]:
    """Tokens of ``text`` followed by an ``end`` token."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    tokens, pos = [], 0
    stripped = text.rstrip()
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        if match is None:
            rest = stripped[pos:]
            column = pos + len(rest) - len(rest.lstrip()) + 1
            raise ExpressionError(f"unexpected character {rest.lstrip()[:1]!r} at column {column}")
        kind = match.lastgroup or "op"
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        pos = match.end()
    tokens.append(Token("end", "", len(stripped)))
    return tokens


@dataclass(frozen=True)
class Num:
    """An integer literal."""

    value: int
    """Its value."""


@dataclass(frozen=True)
class Name:
    """A vocabulary name."""

    name: str
    """The name."""


@dataclass(frozen=True)
class Neg:
    """Unary minus."""

    operand: Expr
    """What is negated."""


@dataclass(frozen=True)
class BinOp:
    """A binary operation."""

    op: str
    """``+ - * / // %``."""
    left: Expr
    """Left operand."""
    right: Expr
    """Right operand."""


@dataclass(frozen=True)
class Call:
    """A call of one of ``FUNCTIONS``."""

    function: str
    """Function name."""
    args: tuple[Expr, ...]
    """Arguments."""


Expr = Num | Name | Neg | BinOp | Call


class _Parser:
    """Recursive descent over the token list."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.index = 0
        self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.index]

    def take(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, text: str) -> None:
        token = self.take()
        if token.text != text or token.kind != "op":
            found = token.text or "end of expression"
            raise ExpressionError(f"expected {text!r} at column {token.pos + 1}, found {found!r}")

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH}")

    def expr(self) -> Expr:
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            node = BinOp(self.take().text, node, self.term())
        return node

    def term(self) -> Expr:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "//", "%"):
            node = BinOp(self.take().text, node, self.unary())
        return node

    def unary(self) -> Expr:
        token = self.peek()
        if token.kind == "op" and token.text in ("-", "+"):
            self.take()
            self.nested()
            operand = self.unary()
            self.depth -= 1
            return Neg(operand) if token.text == "-" else operand
        return self.primary()

    def primary(self) -> Expr:
        token = self.take()
        if token.kind == "int":
            return Num(int(token.text))
        if token.kind == "name":
            if self.peek().kind == "op" and self.peek().text == "(":
                return self.call(token)
            return Name(token.text)
        if token.kind == "op" and token.text == "(":
            self.nested()
            node = self.expr()
            self.depth -= 1
            self.expect(")")
            return node
        found = token.text or "end of expression"
        raise ExpressionError(f"expected a number, a name or '(' at column {token.pos + 1}, found {found!r}")

    def call(self, name: Token) -> Expr:
        if name.text not in FUNCTIONS:
            raise ExpressionError(f"unknown function {name.text!r} at column {name.pos + 1}; "
                                  f"known: {', '.join(sorted(FUNCTIONS))}")
        self.expect("(")
        self.nested()
        args = [self.expr()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            args.append(self.expr())
        self.depth -= 1
        self.expect(")")
        low, high, _ = FUNCTIONS[name.text]
        if len(args) < low or (high is not None and len(args) > high):
            want = str(low) if high == low else f"at least {low}"
            raise ExpressionError(f"{name.text}() takes {want} arguments, got {len(args)}")
        return Call(name.text, tuple(args))


def parse(text: str) -> Expr:
    """The expression tree of ``text``; ``ExpressionError`` says where it goes wrong."""
    parser = _Parser(text)
    if parser.peek().kind == "end":
        raise ExpressionError("empty expression")
    node = parser.expr()
    rest = parser.peek()
    if rest.kind != "end":
        raise ExpressionError(f"unexpected {rest.text!r} at column {rest.pos + 1}")
    return node


def names(node: Expr) -> frozenset[str]:
    """Every vocabulary name ``node`` refers to."""
    if isinstance(node, Name):
        return frozenset((node.name,))
    if isinstance(node, Neg):
        return names(node.operand)
    if isinstance(node, BinOp):
        return names(node.left) | names(node.right)
    if isinstance(node, Call):
        return frozenset().union(*(names(a) for a in node.args))
    return frozenset()


def evaluate(node: Expr, env: Mapping[str, int]) -> int:
    """The integer value of ``node`` with names bound by ``env``."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        if node.name not in env:
            raise ExpressionError(f"unknown name {node.name!r}; known: {', '.join(sorted(env))}")
        return int(env[node.name])
    if isinstance(node, Neg):
        return -evaluate(node.operand, env)
    if isinstance(node, Call):
        return int(FUNCTIONS[node.function][2](*(evaluate(a, env) for a in node.args)))
    left, right = evaluate(node.left, env), evaluate(node.right, env)
    if node.op == "+":
        return left + right
    if node.op == "-":
        return left - right
    if node.op == "*":
        return left * right
    if right == 0:
        raise ExpressionError(f"division by zero in {node.op!r}")
    return left // right if node.op in ("/", "//") else left % right


def evaluate_text(text: str | int, env: Mapping[str, int]) -> int:
    """Parse and evaluate (an ``int`` is returned as it is)."""
    if isinstance(text, bool):
        raise ExpressionError("a boolean is not an integer expression")
    if isinstance(text, int):
        return text
    return evaluate(parse(text), env)
