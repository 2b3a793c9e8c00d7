"""The ``seen`` value of a trainer bucket's state: what the trainer keeps of a bucket of devices
besides their parameters, as JSON.

Per device, when it was last heard (what :mod:`~fleetwatch.streaming.trainer.expiry` forgets it
by) and what tells its repeats apart (:class:`~fleetwatch.streaming.trainer.repeats.RepeatState`);
per bucket, the event-time timer registered for it. Checkpoints hold this value: its layout
changes only with a new
:data:`~fleetwatch.streaming.trainer.job.PLAN_VERSION`.
"""

from __future__ import annotations

import json
from typing import TypedDict

from fleetwatch.streaming.trainer.repeats import RepeatState


class Seen(TypedDict):
    """What the trainer keeps of a bucket besides its parameters."""

    devices: dict[str, int]
    """Device id → the newest event time (ms) of its readings, learned or not."""
    seqs: dict[str, RepeatState]
    """Device id → the sequence numbers it sent within the lateness and the device clock of its
    newest reading: how a repeat is told apart."""
    timer_ms: int | None
    """The event-time timer registered for the bucket."""


def new_seen() -> Seen:
    return {"devices": {}, "seqs": {}, "timer_ms": None}


def encode_seen(seen: Seen) -> str:
    """``seen`` as the state holds it: a JSON object, keys sorted, no spaces, a device's repeat
    state as ``[last_device_ms, ranges]``."""
    return json.dumps(
        {
            "devices": dict(sorted(seen["devices"].items())),
            "seqs": {d: held.to_json() for d, held in sorted(seen["seqs"].items())},
            "timer_ms": seen["timer_ms"],
        },
        separators=(",", ":"),
    )


def decode_seen(value: str | None) -> Seen:
    """The inverse of :func:`encode_seen` (``None``, no state yet: nothing seen)."""
    if value is None:
        return new_seen()
    held = json.loads(value)
    timer = held.get("timer_ms")
    return {
        "devices": {str(d): int(ms) for d, ms in held["devices"].items()},
        "seqs": {str(d): RepeatState.from_json(h) for d, h in held.get("seqs", {}).items()},
        "timer_ms": None if timer is None else int(timer),
    }
