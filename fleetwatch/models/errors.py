"""Errors of the detectors package, all rooted in :class:`FleetwatchError`."""

from fleetwatch.contracts.errors import FleetwatchError


class ModelError(FleetwatchError):
    """Base class of every error the detectors raise on purpose."""


class ParamsError(ModelError):
    """Parameters that cannot be loaded: wrong kind, unknown schema, missing or malformed field."""


class UnknownDetector(ParamsError):
    """A detector kind that the registry does not know."""


class BatchError(ModelError):
    """A batch of readings that does not have the columns or types a detector needs."""
