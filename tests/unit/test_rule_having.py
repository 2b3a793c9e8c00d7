"""The part of a windowed rule's condition above its aggregates, with SQL's three-valued logic:
a comparison with a null is null, AND / OR / NOT over true, false and null as SQL has them,
division by zero is null (ANSI off), and only a true condition fires."""

from __future__ import annotations

import itertools

import pytest

from fleetwatch.streaming.rules import having
from fleetwatch.streaming.rules.having import Tree, Value

T: Tree = ["lit", True]
F: Tree = ["lit", False]
N: Tree = ["lit", None]
LOGIC = {True: T, False: F, None: N}

# SQL's truth tables (ISO/IEC 9075, "<boolean value expression>"), written out, not derived
AND = {
    (True, True): True, (True, False): False, (True, None): None,
    (False, True): False, (False, False): False, (False, None): False,
    (None, True): None, (None, False): False, (None, None): None,
}  # fmt: skip
OR = {
    (True, True): True, (True, False): True, (True, None): True,
    (False, True): True, (False, False): False, (False, None): None,
    (None, True): True, (None, False): None, (None, None): None,
}  # fmt: skip
NOT = {True: False, False: True, None: None}


def agg(i: int) -> Tree:
    return ["agg", i]


def lit(x: float | None) -> Tree:
    return ["lit", x]


@pytest.mark.parametrize(("left", "right"), list(itertools.product(LOGIC, repeat=2)))
def test_and_or_are_three_valued(left: bool | None, right: bool | None) -> None:
    assert having.evaluate(["And", LOGIC[left], LOGIC[right]], []) is AND[left, right]
    assert having.evaluate(["Or", LOGIC[left], LOGIC[right]], []) is OR[left, right]


@pytest.mark.parametrize("value", list(LOGIC))
def test_not_of_null_is_null(value: bool | None) -> None:
    assert having.evaluate(["Not", LOGIC[value]], []) is NOT[value]


@pytest.mark.parametrize(
    "op", ["GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "EqualTo"]
)
def test_a_comparison_with_a_null_is_null_and_does_not_fire(op: str) -> None:
    for tree in ([op, agg(0), lit(1.0)], [op, lit(1.0), agg(0)], [op, agg(0), agg(0)]):
        assert having.evaluate(tree, [None]) is None
        assert having.fires(tree, [None]) is False
        assert having.fires(["Not", tree], [None]) is False  # NOT null is null, not true


@pytest.mark.parametrize(
    ("op", "left", "right", "want"),
    [
        ("GreaterThan", 7.5, 7.0, True),
        ("GreaterThan", 7.0, 7.0, False),
        ("GreaterThanOrEqual", 7.0, 7.0, True),
        ("LessThan", 14.9, 15.0, True),
        ("LessThan", 15.0, 15.0, False),
        ("LessThanOrEqual", 15.0, 15.0, True),
        ("EqualTo", 0.0, 0.0, True),
        ("EqualTo", 1.0, 0.0, False),
    ],
)
def test_comparisons(op: str, left: float, right: float, want: bool) -> None:
    assert having.evaluate([op, agg(0), agg(1)], [left, right]) is want
    assert having.fires([op, agg(0), agg(1)], [left, right]) is want


def test_null_safe_equality_is_never_null() -> None:
    tree = ["EqualNullSafe", agg(0), lit(None)]
    assert having.evaluate(tree, [None]) is True
    assert having.evaluate(tree, [3.0]) is False
    assert having.evaluate(["EqualNullSafe", agg(0), lit(3.0)], [3.0]) is True


def test_division_by_zero_is_null() -> None:
    ratio = ["Divide", agg(0), agg(1)]
    assert having.evaluate(ratio, [6.0, 0.0]) is None
    assert having.evaluate(ratio, [6.0, 4.0]) == 1.5
    assert having.evaluate(["GreaterThan", ratio, lit(1.0)], [6.0, 0.0]) is None
    assert having.fires(["GreaterThan", ratio, lit(1.0)], [6.0, 0.0]) is False
    # a null divisor or dividend is null too, before any division
    assert having.evaluate(ratio, [None, 0.0]) is None
    assert having.evaluate(ratio, [1.0, None]) is None


@pytest.mark.parametrize(
    ("tree", "want"),
    [
        (["Add", agg(0), agg(1)], 10.5),
        (["Subtract", agg(0), agg(1)], 4.5),
        (["Multiply", agg(0), agg(1)], 22.5),
        (["Divide", agg(0), agg(1)], 2.5),
        (["UnaryMinus", agg(0)], -7.5),
        (["abs", ["Subtract", agg(1), agg(0)]], 4.5),
        (["abs", lit(-2.0)], 2.0),
        (["Subtract", ["Multiply", lit(2.0), agg(0)], ["Divide", agg(1), lit(3.0)]], 14.0),
    ],
)
def test_arithmetic(tree: Tree, want: float) -> None:
    assert having.evaluate(tree, [7.5, 3.0]) == pytest.approx(want, rel=1e-15)


@pytest.mark.parametrize("op", ["Add", "Subtract", "Multiply", "Divide"])
def test_arithmetic_with_a_null_is_null(op: str) -> None:
    assert having.evaluate([op, agg(0), lit(2.0)], [None]) is None
    assert having.evaluate([op, lit(2.0), agg(0)], [None]) is None
    assert having.evaluate(["abs", agg(0)], [None]) is None
    assert having.evaluate(["UnaryMinus", agg(0)], [None]) is None


def test_is_null_and_is_not_null_are_never_null() -> None:
    assert having.evaluate(["IsNull", agg(0)], [None]) is True
    assert having.evaluate(["IsNull", agg(0)], [0.0]) is False
    assert having.evaluate(["IsNotNull", agg(0)], [None]) is False
    assert having.evaluate(["IsNotNull", agg(0)], [0.0]) is True
    assert having.evaluate(["IsNull", ["Divide", agg(0), lit(0.0)]], [1.0]) is True


def test_a_silent_window_fires_an_or_that_a_null_comparison_cannot() -> None:
    """``abs(avg(t) - 3) < 1e-3 OR min(y) IS NULL`` over a window with no readings: avg and min
    are null; the comparison is null and the IS NULL true, so the OR is true."""
    tree = [
        "Or",
        ["LessThan", ["abs", ["Subtract", agg(0), lit(3.0)]], lit(1e-3)],
        ["IsNull", agg(1)],
    ]
    empty: list[float | None] = [None, None]
    assert having.fires(tree, empty) is True
    assert having.fires(tree, [3.0005, 1.0]) is True
    assert having.fires(tree, [3.01, 1.0]) is False
    # AND of the same sides: null AND true is null, which does not fire
    both = ["And", tree[1], tree[2]]
    assert having.evaluate(both, empty) is None
    assert having.fires(both, empty) is False


def test_a_count_of_zero_is_a_number_not_a_null() -> None:
    tree = ["EqualTo", agg(0), lit(0.0)]
    assert having.fires(tree, [0.0]) is True
    assert having.fires(tree, [3.0]) is False


def test_an_unknown_operator_is_refused() -> None:
    with pytest.raises(ValueError, match="not an operator"):
        having.evaluate(["Rand", lit(1.0)], [])


def test_fires_only_on_true() -> None:
    values: list[Value] = [True, False, None, 1.0, 0.0]
    assert [having.fires(["lit", v], []) for v in values] == [True, False, False, False, False]
