"""A bucket's devices between micro-batches, and the bucket's state value as the operator
stores it.

:class:`Devices` holds each device's state pickled on its own and unpickles it only when the
batch reads it: a micro-batch touches the devices with readings (at 1,000 readings/s and two
batches a second, about half the fleet; idle, a few probes), not every device of the bucket.
A device read in the batch is pickled again when the bucket is stored; the others keep their
bytes. What the bucket step asks of every device — the event-time timers
(:meth:`Devices.timers`) and the quarantines under way (:meth:`Devices.quarantined_until`) —
is kept beside the bytes, so it needs no unpickling.

A device's state is pickled as the tuple of its values in :data:`FIELDS` order: its field
names are written once in the code, not once per device in the value (pickle memoizes strings
within one pickle, and each device is a pickle of its own).

The value (:func:`dump_bucket`, :func:`load_bucket`) is a pickled dict of JSON's types and
bytes: ``devices`` (id → the device's pickled values), ``timers`` and ``quarantined`` (id → the
device's ``timer_ms`` and ``quarantined_until_ms``, where not ``None``), ``timer_ms`` and
``fleet`` (:class:`BucketState`). A value whose
``devices`` holds states as dicts (each device's state inside the bucket's one pickle) is read
too: a checkpoint written so moves to this layout at each bucket's next write.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, TypedDict, cast

from fleetwatch.streaming.scorer.device_state import DeviceScoringState, new_state

FIELDS: tuple[str, ...] = tuple(new_state())
"""The order of a device's values in its pickle: :class:`DeviceScoringState`'s fields."""
_PROTOCOL = pickle.HIGHEST_PROTOCOL


def pack(state: DeviceScoringState) -> bytes:
    """A device's state as the bytes :class:`Devices` keeps."""
    values = cast(dict[str, Any], state)
    return pickle.dumps(tuple([values[name] for name in FIELDS]), _PROTOCOL)


def unpack(packed: bytes) -> DeviceScoringState:
    return cast(DeviceScoringState, dict(zip(FIELDS, pickle.loads(packed), strict=True)))


class Devices(MutableMapping[str, DeviceScoringState]):
    """A bucket's devices by id, each unpickled when first read (see the module's docstring).

    A state read or set here is the one the caller changes: :meth:`packed` pickles it again.
    """

    __slots__ = ("_open", "_packed", "_quarantined", "_timers")

    def __init__(
        self,
        packed: dict[str, bytes] | None = None,
        timers: dict[str, int] | None = None,
        quarantined: dict[str, int] | None = None,
    ) -> None:
        self._packed: dict[str, bytes] = {} if packed is None else packed
        """Devices as stored: not read in this batch, or read (their bytes as before it)."""
        self._timers: dict[str, int] = {} if timers is None else timers
        self._quarantined: dict[str, int] = {} if quarantined is None else quarantined
        """Of the devices in :attr:`_packed`, as stored."""
        self._open: dict[str, DeviceScoringState] = {}
        """Devices read or set in this batch (the current state)."""

    def __getitem__(self, device_id: str) -> DeviceScoringState:
        state = self._open.get(device_id)
        if state is None:
            state = unpack(self._packed[device_id])
            self._open[device_id] = state
        return state

    def get(self, device_id: str, default: Any = None) -> Any:
        if device_id in self._open or device_id in self._packed:
            return self[device_id]
        return default

    def __setitem__(self, device_id: str, state: DeviceScoringState) -> None:
        self._open[device_id] = state

    def __delitem__(self, device_id: str) -> None:
        if device_id not in self:
            raise KeyError(device_id)
        self._open.pop(device_id, None)
        self._packed.pop(device_id, None)
        self._timers.pop(device_id, None)
        self._quarantined.pop(device_id, None)

    def __contains__(self, device_id: object) -> bool:
        return device_id in self._open or device_id in self._packed

    def __iter__(self) -> Iterator[str]:
        yield from self._packed
        yield from (d for d in self._open if d not in self._packed)

    def __len__(self) -> int:
        return len(self._packed) + sum(1 for d in self._open if d not in self._packed)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def timers(self) -> dict[str, int]:
        """Device → its event-time timer, of the devices with one."""
        return self._current("timer_ms", self._timers)

    def quarantined_until(self) -> dict[str, int]:
        """Device → when its quarantine ends, of the devices quarantined."""
        return self._current("quarantined_until_ms", self._quarantined)

    def _current(self, field: str, stored: dict[str, int]) -> dict[str, int]:
        if not self._open:
            return dict(stored)
        now = {d: t for d, t in stored.items() if d not in self._open}
        for device_id, state in self._open.items():
            value = state[field]  # type: ignore[literal-required]
            if value is not None:
                now[device_id] = int(value)
        return now

    def packed(self) -> tuple[dict[str, bytes], dict[str, int], dict[str, int]]:
        """Every device's bytes (those read in this batch pickled again), timers and
        quarantines, as :func:`dump_bucket` stores them."""
        if not self._open:
            return dict(self._packed), dict(self._timers), dict(self._quarantined)
        packed = dict(self._packed)
        packed.update((d, pack(state)) for d, state in self._open.items())
        return packed, self.timers(), self.quarantined_until()

    @classmethod
    def of(cls, states: dict[str, DeviceScoringState]) -> Devices:
        """Devices from their states (all of them read)."""
        devices = cls()
        devices._open.update(states)
        return devices


class BucketState(TypedDict):
    """What the scorer keeps of a bucket of devices between micro-batches (stored as one value,
    :func:`dump_bucket`); :mod:`~fleetwatch.streaming.scorer.bucket_step` works on it."""

    devices: Devices
    """Each device's state, unpickled when first read."""
    timer_ms: int | None
    """The event-time timer registered for the bucket (the earliest device's when set)."""
    fleet: dict[str, int]
    """Scope → the version of its champion held in the store."""


def dump_bucket(bucket: BucketState) -> bytes:
    """The bucket as the operator's state value (see the module's docstring)."""
    packed, timers, quarantined = bucket["devices"].packed()
    value = {
        "devices": packed,
        "timers": timers,
        "quarantined": quarantined,
        "timer_ms": bucket["timer_ms"],
        "fleet": bucket["fleet"],
    }
    return pickle.dumps(value, _PROTOCOL)


def load_bucket(saved: bytes) -> BucketState:
    """The bucket a value of :func:`dump_bucket` holds (its devices unpickled when read), or of
    the layout with every state inside one pickle."""
    value = pickle.loads(saved)
    devices = value["devices"]
    if devices and not isinstance(next(iter(devices.values())), bytes):
        held = Devices.of(devices)  # the earlier layout: every state unpickled already
    else:
        held = Devices(devices, value["timers"], value["quarantined"])
    return {"devices": held, "timer_ms": value["timer_ms"], "fleet": value["fleet"]}
