"""Devices grouped into a fixed number of buckets: the key of both jobs' stateful operators
(the scorer's and the trainer's own bucket counts are part of their plans)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

BUCKETS = 16
"""The scorer operator's keys: buckets of devices (part of the scorer's plan). Each key costs
the Python worker a few state round trips and an Arrow frame per micro-batch whatever it holds,
and each holds its devices' state in one value that is read and rewritten when any of them
reports: fewer, larger buckets cost less per micro-batch until a bucket's value grows large.
16 keep a 10,000-device fleet's state values to about 600 devices each."""


def bucket_of(device_id: Column, buckets: int) -> Column:
    """The bucket of a device id column among ``buckets`` (Spark's Murmur3 ``hash``: stable
    across runs)."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    return F.pmod(F.hash(device_id), F.lit(buckets))
