"""The scorer's errors."""

from __future__ import annotations

from fleetwatch.contracts.errors import FleetwatchError


class ScoringError(FleetwatchError):
    """The scoring query failed (the message carries Spark's reason)."""
