from fleetwatch.contracts.errors import FleetwatchError


class ServingError(FleetwatchError):
    """The API cannot run (database or Kafka unusable at start), or a request cannot be done."""
