"""Every detector kind by name: build one, or load one from its parameters.

Importing this module registers all the detectors of the package (each subclass of
:class:`~fleetwatch.models.base.Detector` with a ``kind`` registers itself when its module is
imported). The check suite in ``tests/unit/test_detector_checks.py`` runs over :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetwatch.models.base import Detector, detector_class, load_params, registered_kinds
from fleetwatch.models.change import ChangeDetector
from fleetwatch.models.combiner import CombinedDetector
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.seasonal import SeasonalBaseline

__all__ = [
    "KINDS",
    "ChangeDetector",
    "CombinedDetector",
    "FlatlineDetector",
    "PcaDetector",
    "SeasonalBaseline",
    "create",
    "default_detector",
    "load_params",
]

KINDS: Mapping[str, type[Detector]] = registered_kinds()


def create(kind: str, **hyper: Any) -> Detector:
    """A fresh detector of a registered kind with the given hyperparameters."""
    return detector_class(kind)(**hyper)


def default_detector() -> CombinedDetector:
    """What the scorer runs per device: all detectors, combined."""
    return CombinedDetector()
