"""Errors of the detectors package, all rooted in :class:`FleetwatchError`."""

from fleetwatch.contracts.errors import ConfigurationError, FleetwatchError


class ModelError(FleetwatchError):
    """Base class of every error the detectors raise on purpose."""


class ParamsError(ModelError):
    """Parameters that cannot be loaded: wrong kind, unknown schema, missing or malformed field."""


class UnknownDetector(ParamsError):
    """A detector kind that the registry does not know."""


class HyperParameterError(ModelError, ConfigurationError):
    """Constructor arguments a detector refuses: out of range, unknown or of the wrong type.
    A configuration error where they come from the settings; a model error (bad parameters,
    skipped like any) where they come from a ``model.params`` record."""


class BatchError(ModelError):
    """A batch of readings that does not have the columns or types a detector needs."""


class FleetModelError(ModelError):
    """Device parameters that cannot be pooled into one fleet model (kinds or settings differ)."""


class TrackingError(ModelError):
    """MLflow could not be reached or refused a request."""


class RegistryError(TrackingError):
    """A registry request that cannot be served: unknown model, version or alias."""


class UnknownModel(RegistryError):
    """No registered model of that name."""


class UnknownVersion(RegistryError):
    """The model has no such version, or no version under that alias."""


def require_positive(owner: object, *names: str, or_none: bool = False) -> None:
    """Refuse the first of ``owner``'s attributes ``names`` that is not > 0 (with ``or_none``,
    ``None`` passes too), in the order given."""
    for name in names:
        value = getattr(owner, name)
        if or_none and value is None:
            continue
        if not value > 0:
            allowed = "> 0 or None" if or_none else "> 0"
            raise HyperParameterError(f"{name} must be {allowed}, got {value}")
