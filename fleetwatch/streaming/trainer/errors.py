"""The trainer's errors."""

from __future__ import annotations

from fleetwatch.contracts.errors import FleetwatchError


class TrainError(FleetwatchError):
    """The training query failed or was configured with something it cannot run."""


class StopRequested(TrainError):
    """Raised into a micro-batch that starts after the stop began: it writes nothing and is
    not committed, so the next run learns it."""
