"""Every detector kind by name: build one, or load one from its parameters.

Importing this module registers all the detectors of the package (each subclass of
:class:`~fleetwatch.models.base.Detector` with a ``kind`` registers itself when its module is
imported). The check suite in ``tests/unit/test_detector_checks.py`` runs over :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from fleetwatch.models.base import Detector, detector_class, load_params, registered_kinds
from fleetwatch.models.change import ChangeDetector
from fleetwatch.models.combiner import CombinedDetector, default_members
from fleetwatch.models.errors import HyperParameterError, UnknownDetector
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.seasonal import SeasonalBaseline

__all__ = [
    "KINDS",
    "ChangeDetector",
    "CombinedDetector",
    "FlatlineDetector",
    "LevelShiftDetector",
    "PcaDetector",
    "SeasonalBaseline",
    "create",
    "default_detector",
    "detector_factory",
    "load_params",
]

KINDS: Mapping[str, type[Detector]] = registered_kinds()


def create(kind: str, **hyper: Any) -> Detector:
    """A fresh detector of a registered kind with the given hyperparameters."""
    return detector_class(kind)(**hyper)


def default_detector(false_alerts_per_day: float = 1.0) -> CombinedDetector:
    """What the scorer runs per device: the default members, combined, held to
    ``false_alerts_per_day`` false alerts a device-day (``score.false_alerts_per_device_day``)."""
    if not false_alerts_per_day > 0:
        raise HyperParameterError(f"false_alerts_per_day must be > 0, got {false_alerts_per_day}")
    return CombinedDetector(default_members(false_alerts_per_day))


def detector_factory(
    kinds: str | None, false_alerts_per_day: float = 1.0
) -> Callable[[], Detector]:
    """What builds each device's detector: the default one (held to ``false_alerts_per_day``
    a device-day), or (``kinds``: comma-separated registered kinds) a combined detector of
    those kinds with their default hyperparameters. An unknown kind fails here, naming the
    known ones."""
    if not kinds:
        return partial(default_detector, false_alerts_per_day)
    names = [k.strip() for k in kinds.split(",") if k.strip()]
    if not names:
        raise UnknownDetector(f"no detector kind in {kinds!r}")
    for name in names:
        detector_class(name)
    return lambda: CombinedDetector([create(name) for name in names])
