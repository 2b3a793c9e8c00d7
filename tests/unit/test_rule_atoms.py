"""Which rules judge a device, and which values each reads (``projection.atoms_of``): each
distinct SQL once, a device named by some rules judged by those and by the rules of every
device, in the rules' order."""

from __future__ import annotations

from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.projection import atoms_of


def rule(rule_id: str, values: tuple[str, ...], devices: set[str] | None) -> CompiledRule:
    return CompiledRule(
        id=rule_id,
        version=1,
        name=rule_id,
        severity="warning",
        when="…",
        devices=None if devices is None else frozenset(devices),
        metrics=(),
        metric="*",
        values=values,
    )


def test_values_are_shared_and_each_device_gets_its_rules_in_order() -> None:
    rules = [
        rule("a", ("temperature",), {"d1", "d2"}),
        rule("b", ("humidity", "temperature"), None),
        rule("c", ("temperature",), {"d2"}),
        rule("d", ("(status = 'ok')",), None),
    ]
    atoms = atoms_of(rules)
    assert atoms.sql == ("temperature", "humidity", "(status = 'ok')")
    assert atoms.index == {"a": (0,), "b": (1, 0), "c": (0,), "d": (2,)}
    assert atoms.rules_of("d1") == ("a", "b", "d")
    assert atoms.rules_of("d2") == ("a", "b", "c", "d")
    assert atoms.rules_of("d9") == ("b", "d")  # named by none: the rules of every device


def test_without_rules_of_every_device_an_unnamed_device_has_none() -> None:
    atoms = atoms_of([rule("a", ("t",), {"d1"}), rule("b", ("t",), {"d1", "d3"})])
    assert atoms.every == ()
    assert atoms.rules_of("d1") == ("a", "b")
    assert atoms.rules_of("d3") == ("b",)
    assert atoms.rules_of("d2") == ()
