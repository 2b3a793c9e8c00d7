"""The part of a windowed rule's condition above its aggregates, evaluated over the window's
aggregate values, pure.

Spark's parser gives the condition's tree (:mod:`~fleetwatch.streaming.rules.conditions`);
above the aggregates it may hold only what is here: comparisons, ``AND`` / ``OR`` / ``NOT``,
arithmetic, ``abs``, ``IS [NOT] NULL`` and numeric literals. Nulls follow SQL: a comparison
with a null is null, ``AND`` and ``OR`` are three-valued, and division by zero is null (as
with ANSI mode off, which the rules query runs with). A condition that is null does not fire.

A tree is JSON's types: ``["agg", i]`` the i-th aggregate's value, ``["lit", x]``, ``[op,
child, ...]`` for an operator of :data:`OPERATORS`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

Tree = list[Any]
Value = float | bool | None

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "GreaterThan": operator.gt,
    "GreaterThanOrEqual": operator.ge,
    "LessThan": operator.lt,
    "LessThanOrEqual": operator.le,
    "EqualTo": operator.eq,
}
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "Add": operator.add,
    "Subtract": operator.sub,
    "Multiply": operator.mul,
}
OPERATORS = frozenset(
    {
        *_COMPARE,
        *_ARITHMETIC,
        "Divide",
        "And",
        "Or",
        "Not",
        "UnaryMinus",
        "abs",
        "IsNull",
        "IsNotNull",
        "EqualNullSafe",
    }
)


def evaluate(tree: Tree, aggregates: Sequence[float | None]) -> Value:
    head = tree[0]
    if head == "lit":
        return tree[1]  # type: ignore[no-any-return]
    if head == "agg":
        return aggregates[tree[1]]
    if head == "And":
        left, right = evaluate(tree[1], aggregates), evaluate(tree[2], aggregates)
        if left is False or right is False:
            return False
        return None if left is None or right is None else True
    if head == "Or":
        left, right = evaluate(tree[1], aggregates), evaluate(tree[2], aggregates)
        if left is True or right is True:
            return True
        return None if left is None or right is None else False
    if head == "IsNull":
        return evaluate(tree[1], aggregates) is None
    if head == "IsNotNull":
        return evaluate(tree[1], aggregates) is not None
    if head == "EqualNullSafe":
        return evaluate(tree[1], aggregates) == evaluate(tree[2], aggregates)
    args = [evaluate(child, aggregates) for child in tree[1:]]
    if any(a is None for a in args):
        return None
    if head == "Not":
        return not args[0]
    if head == "UnaryMinus":
        return -args[0]  # type: ignore[operator]
    if head == "abs":
        return abs(args[0])  # type: ignore[arg-type]
    if head in _COMPARE:
        return _COMPARE[head](args[0], args[1])
    if head in _ARITHMETIC:
        return _ARITHMETIC[head](args[0], args[1])  # type: ignore[arg-type]
    if head == "Divide":
        return None if args[1] == 0 else args[0] / args[1]  # type: ignore[operator]
    raise ValueError(f"not an operator of a rule's condition: {head}")


def fires(tree: Tree, aggregates: Sequence[float | None]) -> bool:
    """Whether the condition holds (true, not false or null)."""
    return evaluate(tree, aggregates) is True
