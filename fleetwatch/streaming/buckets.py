"""Devices grouped into a fixed number of buckets: the key of both jobs' stateful operators
(the scorer's and the trainer's own bucket counts are part of their plans)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def bucket_of(device_id: Column, buckets: int) -> Column:
    """The bucket of a device id column among ``buckets`` (Spark's Murmur3 ``hash``: stable
    across runs)."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(device_id), F.lit(buckets))
