"""How the scorer treats every device: the ``score.*`` settings its per-device step needs
(:func:`~fleetwatch.streaming.scorer.processor.policy_of` builds it from the settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetwatch.contracts.telemetry import DEVICE_METRICS
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.scorer.quarantine import Rule
from fleetwatch.streaming.scorer.windows import WindowSpec


@dataclass(frozen=True)
class Policy:
    session_gap_ms: int
    min_readings: int
    clear_readings: int
    baseline: FixedBaseline
    state_every_ms: int = 5_000
    fleet_model: str = "fallback"
    """``score.fleet_model``: when the scope's champion replaces the device's own multivariate
    detector — ``fallback`` (own one not fitted yet), ``always`` or ``off``."""
    familiar_hold_ms: int = 600_000
    """How long after a device's move into a state its fleet knows its moved metrics' own
    alerts are held at most (``score.new_normal_after_s``;
    :mod:`~fleetwatch.streaming.scorer.device_moves`)."""
    windows: WindowSpec = field(default_factory=lambda: WindowSpec(60_000, 60_000))
    """Event-time windows of the metrics (:mod:`fleetwatch.streaming.scorer.windows`)."""
    quarantine: Rule = field(default_factory=Rule)
    """When failing devices are quarantined, and for how long."""
    expire_after_ms: int = 30 * 24 * 3_600_000
    """A device silent this long in event time leaves the scorer's state."""
    max_metrics: int = DEVICE_METRICS
    """Metric names a device may report (``score.max_metrics``)."""
