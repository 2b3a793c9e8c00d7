"""The API's database: what the materialiser writes and the routes read."""

from fleetwatch.serving.store.base import Store, now_ms

__all__ = ["Store", "now_ms"]
