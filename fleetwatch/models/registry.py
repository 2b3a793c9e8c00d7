"""Every detector kind by name: build one, or load one from its parameters.

Importing this module registers all the detectors of the package (each subclass of
:class:`~fleetwatch.models.base.Detector` with a ``kind`` registers itself when its module is
imported). The check suite in ``tests/unit/test_detector_checks.py`` runs over :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from fleetwatch.contracts.settings import ScoreSettings
from fleetwatch.models.base import Detector, detector_class, load_params, registered_kinds
from fleetwatch.models.change import ChangeDetector
from fleetwatch.models.combiner import CombinedDetector, default_members
from fleetwatch.models.errors import UnknownDetector, require_positive
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.level import NEW_NORMAL_AFTER_S, LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.seasonal import SeasonalBaseline

__all__ = [
    "DEFAULT_TUNING",
    "KINDS",
    "ChangeDetector",
    "CombinedDetector",
    "FlatlineDetector",
    "LevelShiftDetector",
    "PcaDetector",
    "SeasonalBaseline",
    "Tuning",
    "create",
    "default_detector",
    "detector_factory",
    "load_params",
]

KINDS: Mapping[str, type[Detector]] = registered_kinds()


def create(kind: str, **hyper: Any) -> Detector:
    """A fresh detector of a registered kind with the given hyperparameters."""
    return detector_class(kind)(**hyper)


@dataclass(frozen=True)
class Tuning:
    """What an operator sets of the default detector a new device starts with."""

    false_alerts_per_day: float = 1.0
    """``score.false_alerts_per_device_day``."""
    new_normal_after_s: float | None = NEW_NORMAL_AFTER_S
    """``score.new_normal_after_s`` (``None``: never)."""
    device_calibration: bool = False
    """``score.device_calibration``: one calibrated decision per device, holding the budget
    (:mod:`~fleetwatch.models.device_tail`)."""

    def __post_init__(self) -> None:
        require_positive(self, "false_alerts_per_day")
        require_positive(self, "new_normal_after_s", or_none=True)

    @classmethod
    def of(cls, score: ScoreSettings) -> Tuning:
        return cls(
            score.false_alerts_per_device_day,
            score.new_normal_after_s or None,
            score.device_calibration,
        )


DEFAULT_TUNING = Tuning()


def default_detector(tuning: Tuning = DEFAULT_TUNING) -> CombinedDetector:
    """What the scorer runs per device: the default members, combined, held to
    ``tuning.false_alerts_per_day`` false alerts a device-day."""
    members = default_members(tuning.false_alerts_per_day, tuning.new_normal_after_s)
    budget = tuning.false_alerts_per_day if tuning.device_calibration else None
    return CombinedDetector(members, device_budget=budget)


def detector_factory(kinds: str | None, tuning: Tuning = DEFAULT_TUNING) -> Callable[[], Detector]:
    """What builds each device's detector: the default one (with ``tuning``), or (``kinds``:
    comma-separated registered kinds) a combined detector of those kinds with their default
    hyperparameters. An unknown kind fails here, naming the known ones."""
    if not kinds:
        return partial(default_detector, tuning)
    names = [k.strip() for k in kinds.split(",") if k.strip()]
    if not names:
        raise UnknownDetector(f"no detector kind in {kinds!r}")
    for name in names:
        detector_class(name)
    return lambda: CombinedDetector([create(name) for name in names])
