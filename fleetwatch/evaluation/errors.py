"""Errors of the evaluation package, rooted in :class:`FleetwatchError`."""

from fleetwatch.contracts.errors import FleetwatchError


class EvaluationError(FleetwatchError):
    """Labels and detections that cannot be scored together: lengths differ, times out of
    order, labels other than 0 and 1, a window that is not positive."""
