"""The root of every error fleetwatch raises on purpose."""


class FleetwatchError(Exception):
    """Base class: each package derives its own errors from this one."""


class ConfigurationError(FleetwatchError):
    """Settings that cannot work (refused at start, never mid-run)."""


class PayloadError(FleetwatchError):
    """A payload that does not follow the wire contract; the message says which rule it broke."""


class ParamsRecordError(PayloadError):
    """A ``model.params`` record that does not follow its contract
    (:mod:`fleetwatch.contracts.model_params`)."""
