"""Devices grouped into a fixed number of buckets, the trainer's unit of state and of work.

Spark's ``transformWithStateInPandas`` pays per grouping key, whatever the key holds: a state
request to the JVM for the key, one for each state read and write, and one Arrow batch (a
pandas frame converted column by column) for what the key emits. Profiled on the trainer with
one key per device, those were about 60% of the Python worker's time, the learning 20%. Keyed
by bucket instead (``pmod(hash(device_id), BUCKETS)``), a key holds the parameters of all its
devices in one ``ValueState`` (:func:`encode`: a JSON object of device id → parameters text)
and emits the updates of all its devices that learned in one frame; the per-device work is
the learning itself.

``BUCKETS`` is part of the trainer's plan (the state is keyed by it): changing it needs a new
``PLAN_VERSION`` (a fresh checkpoint, seeded from ``model.params``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fleetwatch.models import params
from fleetwatch.models.errors import ParamsError

if TYPE_CHECKING:
    from pyspark.sql import Column

BUCKETS = 64
"""About 150 devices of a 10,000-device fleet per bucket (a state value of about 1 MB)."""


def bucket_of(device_id: Column) -> Column:
    """The bucket of a device id column (Spark's Murmur3 ``hash``: stable across runs)."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(device_id), F.lit(BUCKETS))


def encode(bucket: Mapping[str, str]) -> str:
    """A bucket's parameters (device id → canonical parameters JSON) as its state value."""
    return json.dumps(dict(sorted(bucket.items())), separators=(",", ":"))


def decode(value: str | None) -> dict[str, str]:
    """The inverse of :func:`encode` (``None``, no state yet: an empty bucket)."""
    if value is None:
        return {}
    bucket = json.loads(value)
    if not isinstance(bucket, dict) or not all(isinstance(v, str) for v in bucket.values()):
        raise ParamsError("a trainer bucket state must map device ids to parameters text")
    return bucket


def version_of(params_json: str) -> int:
    return int(params.loads(params_json)["version"])


def merge_newer(bucket: dict[str, str], seeds: Iterable[tuple[str, str]]) -> None:
    """Add ``(device_id, parameters JSON)`` pairs, keeping per device the highest version."""
    for device_id, candidate in seeds:
        held = bucket.get(device_id)
        if held is None or version_of(candidate) > version_of(held):
            bucket[device_id] = candidate
