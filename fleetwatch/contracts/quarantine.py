"""Quarantine lifts on ``device.quarantine-lifts`` (``topics.quarantine_lifts``): the record the
API's ``POST /devices/{device_id}/quarantine/lift`` writes and the scorer reads beside
``model.params`` (:mod:`fleetwatch.streaming.scorer.quarantine`). Its key is
``quarantine:{device_id}`` (:data:`~fleetwatch.contracts.identifiers.QUARANTINE_KEY_PREFIX`,
never a device's key; the topic's compaction keeps each device's newest), its value
``{"device_id", "lifted_ms"}``: a quarantine that began at or before ``lifted_ms`` ends. The
scorer takes lifts from that topic only, and parameters from ``model.params`` only."""

from __future__ import annotations

import json

from fleetwatch.contracts import wire
from fleetwatch.contracts.identifiers import QUARANTINE_KEY_PREFIX, after_prefix


def lift_key(device_id: str) -> str:
    """The key of a device's lift record."""
    return f"{QUARANTINE_KEY_PREFIX}{device_id}"


def lifted_device(key: str | None) -> str | None:
    """The device of a lift record's key, ``None`` for any other key."""
    return after_prefix(key, QUARANTINE_KEY_PREFIX)


def lift_value(device_id: str, lifted_ms: int) -> str:
    return json.dumps({"device_id": device_id, "lifted_ms": lifted_ms}, separators=(",", ":"))


def newest_lift(values: list[str]) -> int | None:
    """The newest ``lifted_ms`` among lift records (a record that does not parse is ignored:
    lifting is idempotent, and a bad record must not stop the bucket)."""
    newest: int | None = None
    for value in values:
        try:
            lifted = wire.loads(value).get("lifted_ms")
        except (ValueError, AttributeError):
            continue
        if type(lifted) is int and (newest is None or lifted > newest):
            newest = lifted
    return newest
