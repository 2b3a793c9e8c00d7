from fleetwatch.contracts.errors import FleetwatchError


class StackError(FleetwatchError):
    """The local stack cannot start or stop; the message is one line and names the log."""
