"""A rule as the rules query runs it: the SQL the projection evaluates per reading, and what
the per-device step does with the values (:mod:`~fleetwatch.streaming.rules.conditions`
makes one from a :class:`~fleetwatch.contracts.rules.RuleRecord` with Spark's parser)."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.contracts.alerts import Severity
from fleetwatch.streaming.rules.having import Tree


@dataclass(frozen=True)
class CompiledRule:
    id: str
    version: int
    name: str
    severity: Severity
    when: str
    """The condition as the operator wrote it."""
    devices: frozenset[str] | None
    """The devices judged; ``None``: every device."""
    metrics: tuple[str, ...]
    """The metrics the condition names, in the order it names them."""
    metric: str
    """The metric an alert names: the first the condition names, ``*`` when it names none."""
    values: tuple[str, ...]
    """SQL the projection evaluates per reading, each as a double: without a window, the
    values the condition compares and the alert shows (:attr:`having` over them); with one,
    each aggregate's argument (``1`` for ``count(*)``)."""
    condition: str | None = None
    """SQL of the condition per reading (a rule without a window): what the real-time query
    filters on."""
    shown: str | None = None
    """SQL of the value an alert of a rule without a window shows: the condition's left side
    when it is a comparison, else its first metric."""
    window_ms: tuple[int, int] | None = None
    """(size, slide) of a windowed rule."""
    aggregates: tuple[str, ...] = ()
    """Each aggregate's function, in the order of :attr:`values`."""
    having: Tree | None = None
    """The condition over :attr:`values` (:mod:`~fleetwatch.streaming.rules.having`): above its
    aggregates with a window; above its compared expressions without one."""
    evidence: Tree | None = None
    """The value an alert shows, over :attr:`values`: with a window, the left side of the
    condition when it is a comparison, else the first aggregate; without, :attr:`shown`."""
    since_ms: int | None = None
    """When this version was accepted (a rule without a window, from the API): the real-time
    query and the rules query judge with it only readings the gateway received from then on
    (a reading without ``received_ms``: its event time), so a restart that reads
    ``telemetry.raw`` again does not judge older readings by a newer version, and both queries
    open an episode on the same first reading, under the same id."""

    @property
    def windowed(self) -> bool:
        return self.window_ms is not None
