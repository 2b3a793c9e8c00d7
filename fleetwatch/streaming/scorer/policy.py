"""How the scorer treats every device: the ``score.*`` settings its per-device step needs
(:func:`policy_of` builds it from the settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetwatch.contracts.settings import Settings
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


def policy_of(settings: Settings) -> Policy:
    return Policy(
        session_gap_ms=settings.score.session_gap_s * 1000,
        min_readings=settings.score.min_readings,
        clear_readings=settings.score.clear_readings,
        baseline=FixedBaseline(bands=dict(settings.score.baseline)),
        fleet_model=settings.score.fleet_model,
        # a shift never taken as normal (0): a hold lasts until its metric is calm
        familiar_hold_ms=round(settings.score.new_normal_after_s * 1000)
        or settings.score.expire_after_s * 1000,
        windows=WindowSpec(
            settings.score.window_size_s * 1000, settings.score.window_slide_s * 1000
        ),
        quarantine=Rule(settings.score.quarantine_after, settings.score.quarantine_s * 1000),
        expire_after_ms=settings.score.expire_after_s * 1000,
        max_metrics=settings.score.max_metrics,
    )
