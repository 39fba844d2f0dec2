"""The launch-expression grammar: precedence, integer semantics, and everything it must refuse."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compliance.verify.expr import ExpressionError, evaluate_text, names, parse

ENV = {"num_bags": 10, "dim": 129, "pooling": 20, "VEC": 4}


@pytest.mark.parametrize(("text", "value"), [
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("7 / 2", 3),
    ("7 // 2", 3),
    ("-7 // 2", -4),
    ("7 % 4", 3),
    ("10 - 4 - 3", 3),
    ("--3", 3),
    ("+3", 3),
    ("ceil_div(num_bags * 32, 256)", 2),
    ("ceil_div(dim, 32 * VEC)", 2),
    ("min(dim, 64, pooling)", 20),
    ("max(1, num_bags - 100)", 1),
    ("gcd(dim * 4, 16)", 4),
    ("  (num_bags*pooling+255)/256  ", 1),
])
def test_values(text: str, value: int) -> None:
    assert evaluate_text(text, ENV) == value


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty expression"),
    ("__import__('os')", "unexpected character"),
    ("__import__(1)", "unknown function '__import__'"),
    ("getattr(dim, 2)", "unknown function"),
    ("os.system", "unexpected character '.'"),
    ("'a'", "unexpected character"),
    ("2 ** 3", "expected a number"),
    ("1 +", "expected a number"),
    ("(1 + 2", "expected ')'"),
    ("1 2", "unexpected '2'"),
    ("min(1)", "min() takes at least 2"),
    ("ceil_div(1, 2, 3)", "ceil_div() takes 2"),
    ("1 / 0", "division by zero"),
    ("5 % (dim - 129)", "division by zero"),
    ("ceil_div(4, 0)", "ceil_div by zero"),
    ("lambda", "unknown name 'lambda'"),
    ("num_bags if 1 else 2", "unexpected 'if'"),
    ("1.5", "unexpected character '.'"),
    ("(" * 40 + "1" + ")" * 40, "nested deeper"),
    ("1+" * 200 + "1", "longer than"),
])
def test_refused(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        evaluate_text(text, ENV)


def test_names_and_integers_pass_through() -> None:
    assert names(parse("ceil_div(num_bags, VEC) + dim * 2")) == {"num_bags", "VEC", "dim"}
    assert evaluate_text(256, ENV) == 256
    with pytest.raises(ExpressionError):
        evaluate_text(True, ENV)  # type: ignore[arg-type]


_ints = st.integers(min_value=-10**6, max_value=10**6)


@st.composite
def _expression(draw: st.DrawFn, depth: int = 0) -> tuple[str, int]:
    if depth > 3 or draw(st.booleans()):
        value = draw(_ints)
        return (f"({value})" if value < 0 else str(value)), value
    left, lv = draw(_expression(depth + 1))
    right, rv = draw(_expression(depth + 1))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    if op in ("//", "%") and rv == 0:
        op = "+"
    value = {"+": lv + rv, "-": lv - rv, "*": lv * rv, "//": lv // rv if rv else 0,
             "%": lv % rv if rv else 0}[op]
    return f"({left} {op} {right})", value


@given(_expression())
def test_matches_integer_arithmetic(case: tuple[str, int]) -> None:
    text, value = case
    if len(text) <= 256:
        assert evaluate_text(text, {}) == value
