"""The API's database: what the materialiser writes and the routes read."""

from fleetwatch.contracts.clock import now_ms
from fleetwatch.serving.store.base import Store

__all__ = ["Store", "now_ms"]
