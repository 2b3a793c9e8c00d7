"""Errors the simulator raises on purpose."""

from fleetwatch.contracts.errors import FleetwatchError


class SimulatorError(FleetwatchError):
    """The simulator cannot run as asked (unreachable broker, refused credentials, bad input)."""


class ScenarioError(SimulatorError):
    """A scenario file or option that cannot describe a run."""
