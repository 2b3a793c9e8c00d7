"""Devices grouped into a fixed number of buckets, the trainer's unit of state and of work.

Spark's ``transformWithStateInPandas`` pays per grouping key, whatever the key holds: a state
request to the JVM for the key, one for each state read and write, and one Arrow batch (a
pandas frame converted column by column) for what the key emits: with one key per device,
more than the learning costs. Keyed by bucket (``pmod(hash(device_id), BUCKETS)``), a key holds
the parameters of all its devices in one ``ValueState`` (:func:`encode`: a JSON object of
device id → parameters text) and emits the updates of all its devices that learned in one
frame; the per-device work is the learning itself.

The parameters text of a device is read into a detector once per Python worker, not once per
batch: :class:`WarmBuckets` keeps, per bucket, the detectors a worker last wrote the bucket's
state from, and hands them back when the state read is that same value (by digest). The state
store stays the truth; a value that another worker, a restart or a retried batch wrote is not
the one remembered, and is read from its text. The texts are not kept: the state value read
holds them, and reading them back is parsing a JSON object of strings, where building
detectors from them is most of a cold bucket's extra cost. A worker
keeps only the buckets of the shuffle partition its latest task ran (a bucket is always in the
same partition, so a task of another partition could never use the others): a detector costs
several times its parameters text in memory, and a worker that kept every bucket it ever wrote
would hold the whole fleet's.

``BUCKETS`` is part of the trainer's plan (the state is keyed by it): changing it needs a new
``PLAN_VERSION`` (a fresh checkpoint, seeded from ``model.params``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from fleetwatch.models import params
from fleetwatch.models.errors import ParamsError

if TYPE_CHECKING:
    from fleetwatch.models.base import Detector

BUCKETS = 64
"""The trainer's buckets: about 150 devices of a 10,000-device fleet per bucket (a state value of
about 2 MB)."""


_ENCODE = msgspec.json.Encoder(order="sorted").encode
_DECODE = msgspec.json.Decoder().decode


def encode(bucket: Mapping[str, str]) -> str:
    """A bucket's parameters (device id → canonical parameters JSON) as its state value: a JSON
    object, keys sorted, no spaces, what is not ASCII escaped. msgspec writes the bytes
    ``json.dumps`` writes but for DEL and what is not ASCII, which it leaves unescaped
    (parameters text holds neither: ``json.dumps`` wrote it); a value with them (a device id
    beyond ASCII) is written by ``json.dumps``."""
    value = _ENCODE(dict(bucket))
    if value.isascii() and b"\x7f" not in value:
        return value.decode("ascii")
    return json.dumps(dict(sorted(bucket.items())), separators=(",", ":"))


def decode(value: str | None) -> dict[str, str]:
    """The inverse of :func:`encode` (``None``, no state yet: an empty bucket)."""
    if value is None:
        return {}
    bucket: Any
    try:
        bucket = _DECODE(value)
    except msgspec.MsgspecError:  # what msgspec refuses, the standard parser may read
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


def digest(value: str) -> bytes:
    """A digest of a bucket's state value, to recognise it without keeping it: SHA-256, which
    x86's SHA extensions and ARMv8's crypto extensions compute in hardware (about twice
    BLAKE2b's pace where they are)."""
    return hashlib.sha256(value.encode()).digest()


@dataclass
class Bucket:
    """A bucket's parameters text per device, and the detectors already loaded from them."""

    texts: dict[str, str] = field(default_factory=dict)
    detectors: dict[str, Detector] = field(default_factory=dict)
    """Per device, a detector whose parameters are ``texts[device]`` (any subset of devices)."""


class WarmBuckets:
    """Per bucket key, the detectors of the :class:`Bucket` whose :func:`encode` was last
    written as its state, for the buckets of one partition.

    :meth:`take` removes what it returns, so a bucket whose step failed half-way is never
    handed out again; :meth:`keep` puts it back once its new value is written.
    :meth:`enter` starts a task of a partition: the buckets kept for another are dropped."""

    def __init__(self) -> None:
        self._held: dict[object, tuple[bytes, dict[str, Detector]]] = {}
        self._partition: int | None = None
        self._lock = threading.Lock()

    def enter(self, partition: int) -> None:
        """A task of shuffle ``partition`` starts: only that partition's buckets stay kept."""
        with self._lock:
            if partition != self._partition:
                self._held.clear()
                self._partition = partition

    def __len__(self) -> int:
        """How many buckets are kept."""
        with self._lock:
            return len(self._held)

    def take(self, key: object, value: str | None) -> Bucket:
        """The bucket of state ``value`` (``None``: no state yet), with the detectors kept for
        that value when they are."""
        with self._lock:
            held = self._held.pop(key, None)
        if value is None:
            return Bucket()
        if held is not None and held[0] == digest(value):
            return Bucket(decode(value), held[1])
        return Bucket(decode(value))

    def keep(self, key: object, value: str, bucket: Bucket) -> None:
        """Remember ``bucket``'s detectors as those of the state value ``value``."""
        with self._lock:
            self._held[key] = (digest(value), bucket.detectors)
