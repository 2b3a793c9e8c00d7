from fleetwatch.contracts.errors import FleetwatchError


class GrafanaPushError(FleetwatchError):
    """Grafana could not be reached or refused a request; the message says which."""
