"""What the scorer keeps of a bucket of devices (:class:`BucketState`), the operator's ``live``
value it is stored as (:func:`encode`), and the buckets a Python worker keeps warm between
micro-batches (:class:`WarmBuckets`).

The value (:func:`encode`) is MessagePack (msgspec), tagged by its first byte: the state holds
only JSON's types (dicts with string keys, lists, strings, numbers, booleans, ``None``;
tested), which MessagePack gives back exactly, NaN and infinities included; msgspec writes it
in a fraction of pickle's time (every micro-batch writes its buckets) and reads it about as fast.
What MessagePack cannot hold (a string that is not UTF-8, an integer beyond 64 bits, a numpy
number that slipped in) is pickled instead, under its own tag: such a state still round-trips
as it is, a bucket is never lost to its encoding.

Decoding a bucket's value builds every object of every device it holds, whatever few of them a
micro-batch touches. :class:`WarmBuckets` keeps, per bucket, the state a worker last wrote with
the value it wrote; when the value read back is that same value (bytes equal), the state
already in memory is used. The state store stays the truth: a value another worker, a restart
or a retried batch wrote is not the one kept, and is decoded.
"""

from __future__ import annotations

import pickle
import threading
from typing import TypedDict, cast

import msgspec

from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.errors import BucketStateError


class BucketState(TypedDict):
    """What the scorer keeps of a bucket of devices (one value, JSON's types only)."""

    devices: dict[str, DeviceScoringState]
    timer_ms: int | None
    """The event-time timer registered for the bucket (the earliest device's when set)."""
    fleet: dict[str, int]
    """Scope → the version of its champion held in the store."""


def new_bucket() -> BucketState:
    return {"devices": {}, "timer_ms": None, "fleet": {}}


MSGPACK = b"m"
PICKLE = b"p"
"""The tags: the value's first byte says how the rest is encoded."""

_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder().decode


def encode(bucket: BucketState) -> bytes:
    """The bucket's state value: MessagePack, or pickled when MessagePack cannot hold it."""
    try:
        return MSGPACK + _ENCODE(bucket)
    except (TypeError, UnicodeEncodeError, OverflowError):
        return PICKLE + pickle.dumps(bucket, protocol=pickle.HIGHEST_PROTOCOL)


def decode(value: bytes) -> BucketState:
    """The inverse of :func:`encode`."""
    tag, body = value[:1], memoryview(value)[1:]
    if tag == MSGPACK:
        return cast(BucketState, _DECODE(body))
    if tag == PICKLE:
        return cast(BucketState, pickle.loads(body))
    raise BucketStateError(f"a scorer bucket's state value has an unknown encoding tag {tag!r}")


class WarmBuckets:
    """Per bucket key, the state whose :func:`encode` was last written as its value.

    :meth:`take` removes what it returns, so a bucket whose step failed half-way is never
    handed out again; :meth:`keep` puts it back once its new value is written."""

    def __init__(self) -> None:
        self._held: dict[object, tuple[bytes, BucketState]] = {}
        self._lock = threading.Lock()

    def take(self, key: object, value: bytes) -> BucketState:
        """The state of ``value``: the one kept when ``value`` is the value it was kept with,
        else decoded."""
        with self._lock:
            held = self._held.pop(key, None)
        if held is not None and held[0] == value:
            return held[1]
        return decode(value)

    def keep(self, key: object, value: bytes, bucket: BucketState) -> None:
        """Remember ``bucket`` as the state whose value is now ``value``."""
        with self._lock:
            self._held[key] = (value, bucket)

    def __len__(self) -> int:
        return len(self._held)
