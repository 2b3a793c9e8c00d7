"""The trainer's errors."""

from __future__ import annotations

from fleetwatch.contracts.errors import FleetwatchError


class TrainError(FleetwatchError):
    """The training query failed or was configured with something it cannot run."""
