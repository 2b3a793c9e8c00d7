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


Judge = Callable[[Sequence[float | None]], Value]
_COMPILED: dict[int, tuple[Tree, Judge]] = {}
"""id(tree) → (the tree, its function): the tree held, so its id is not reused meanwhile."""
_MOST_COMPILED = 65_536


def evaluate(tree: Tree, aggregates: Sequence[float | None]) -> Value:
    """The tree's value over ``aggregates``, by its function (:func:`compiled`)."""
    return compiled(tree)(aggregates)


def compiled(tree: Tree) -> Judge:
    """The tree as a Python function of the values, made once per tree: a rule's condition is
    evaluated for every reading that it judges."""
    held = _COMPILED.get(id(tree))
    if held is not None and held[0] is tree:
        return held[1]
    judge = _compile(tree)
    if len(_COMPILED) >= _MOST_COMPILED:
        _COMPILED.clear()
    _COMPILED[id(tree)] = (tree, judge)
    return judge


def _compile(tree: Tree) -> Judge:
    head = tree[0]
    if head == "lit":
        constant: Value = tree[1]
        return lambda _: constant
    if head == "agg":
        index: int = tree[1]
        return lambda values: values[index]
    children = [_compile(child) for child in tree[1:]]
    if head in ("And", "Or"):
        return _logic(head, children[0], children[1])
    if head in ("IsNull", "IsNotNull", "EqualNullSafe"):
        return _null_aware(head, children)
    if head in ("Not", "UnaryMinus", "abs"):
        return _unary(head, children[0])
    if head in _COMPARE or head in _ARITHMETIC or head == "Divide":
        return _binary(head, children[0], children[1])
    raise ValueError(f"not an operator of a rule's condition: {head}")


def _logic(head: str, left: Judge, right: Judge) -> Judge:
    """``AND`` / ``OR`` in SQL's three-valued logic (both sides evaluated)."""
    decisive = head != "And"  # False decides an AND, True an OR

    def judge(values: Sequence[float | None]) -> Value:
        a, b = left(values), right(values)
        if a is decisive or b is decisive:
            return decisive
        return None if a is None or b is None else not decisive

    return judge


def _null_aware(head: str, children: list[Judge]) -> Judge:
    child = children[0]
    if head == "IsNull":
        return lambda values: child(values) is None
    if head == "IsNotNull":
        return lambda values: child(values) is not None
    other = children[1]
    return lambda values: child(values) == other(values)


def _unary(head: str, child: Judge) -> Judge:
    def judge(values: Sequence[float | None]) -> Value:
        a = child(values)
        if a is None:
            return None
        if head == "Not":
            return not a
        return -a if head == "UnaryMinus" else abs(a)

    return judge


def _binary(head: str, left: Judge, right: Judge) -> Judge:
    """A comparison or arithmetic: null if either side is, as SQL has it; division by zero is
    null (ANSI mode off)."""
    op: Callable[[Any, Any], Any] | None = _COMPARE.get(head) or _ARITHMETIC.get(head)

    def judge(values: Sequence[float | None]) -> Value:
        a, b = left(values), right(values)
        if a is None or b is None:
            return None
        if op is None:
            return None if b == 0 else a / b
        return op(a, b)  # type: ignore[no-any-return]

    return judge


def fires(tree: Tree, aggregates: Sequence[float | None]) -> bool:
    """Whether the condition holds (true, not false or null)."""
    return evaluate(tree, aggregates) is True
