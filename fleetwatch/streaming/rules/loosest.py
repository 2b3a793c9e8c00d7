"""The loosest condition a set of rules without a window implies, as Spark SQL: a reading on
which it does not hold fires none of them, so the real-time query
(:mod:`~fleetwatch.streaming.rules.fast`) filters on it before it evaluates each rule.

Rules are grouped by the shape of their lifted condition
(:func:`~fleetwatch.streaming.rules.conditions.compile_rule`: ``AND`` / ``OR`` and comparisons
of a value with a number), the numbers set aside; a group holds where its loosest member may:
``x > t`` for the least ``t`` of the group, ``x < t`` for the greatest, ``x = t`` for any of
its ``t``; ``AND`` and ``OR`` of such bounds for ``AND`` and ``OR``. Whatever a rule fires on,
its group's bound holds on: a bound is implied by each member. A shape with anything else
(``NOT``, arithmetic above the values, a null) bounds nothing, and neither does the set then.
Thresholds sit in a metric's tails, so most readings fail every bound, and the query's work per
reading grows with the shapes of the rules, not with the rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.having import Tree

_FLIPPED = {
    "GreaterThan": "LessThan",
    "GreaterThanOrEqual": "LessThanOrEqual",
    "LessThan": "GreaterThan",
    "LessThanOrEqual": "GreaterThanOrEqual",
    "EqualTo": "EqualTo",
}
_SQL = {
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
}


def loosest(rules: Sequence[CompiledRule]) -> str | None:
    """SQL over a reading's columns that holds wherever any of ``rules`` (without a window)
    fires; None when no bound tighter than true is known."""
    groups: dict[str, list[tuple[Tree, Sequence[str]]]] = {}
    for rule in rules:
        if rule.having is None:
            return None
        groups.setdefault(_shape(rule.having, rule.values), []).append((rule.having, rule.values))
    bounds = []
    for members in groups.values():
        bound = _bound([tree for tree, _ in members], members[0][1])
        if bound is None:
            return None
        bounds.append(bound)
    return " OR ".join(f"({b})" for b in bounds) if bounds else None


def _shape(tree: Tree, values: Sequence[str]) -> str:
    """The tree with its numbers set aside and its values named by their SQL."""

    def strip(node: Tree) -> Tree:
        if node[0] == "lit":
            return ["lit"]
        if node[0] == "agg":
            return ["agg", values[node[1]]]
        return [node[0], *(strip(c) for c in node[1:])]

    return json.dumps(strip(tree))


def _bound(trees: list[Tree], values: Sequence[str]) -> str | None:
    """The loosest bound of same-shaped ``trees`` (over ``values``), or None for none."""
    head = trees[0][0]
    if head in ("And", "Or"):
        parts = [_bound([t[i] for t in trees], values) for i in (1, 2)]
        if head == "And":
            known = [p for p in parts if p is not None]
            return " AND ".join(f"({p})" for p in known) if known else None
        return None if None in parts else " OR ".join(f"({p})" for p in parts)
    if head not in _FLIPPED:
        return None
    left, right = trees[0][1], trees[0][2]
    if left[0] == "agg" and right[0] == "lit":
        op, index, numbers = head, left[1], [t[2][1] for t in trees]
    elif left[0] == "lit" and right[0] == "agg":
        op, index, numbers = _FLIPPED[head], right[1], [t[1][1] for t in trees]
    else:
        return None
    if any(not isinstance(n, float) for n in numbers):
        return None  # a null or a truth: no bound
    value = f"CAST(({values[index]}) AS DOUBLE)"
    if op == "EqualTo":
        return f"{value} IN ({', '.join(_number(n) for n in sorted(set(numbers)))})"
    loosest_number = min(numbers) if op.startswith("Greater") else max(numbers)
    return f"{value} {_SQL[op]} {_number(loosest_number)}"


def _number(value: float) -> str:
    """A double as SQL, exactly (Spark reads a bare ``25.3`` as a decimal)."""
    return f"CAST('{value!r}' AS DOUBLE)"
