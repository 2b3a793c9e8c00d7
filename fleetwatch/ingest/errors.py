from fleetwatch.contracts.errors import FleetwatchError, PayloadError


class IngestError(FleetwatchError):
    """The gateway cannot run (broker unreachable at start, bad configuration)."""


class PayloadRejected(PayloadError):
    """A message the gateway will not accept; it goes to the dead-letter topic with this reason."""
