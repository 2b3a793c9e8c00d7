"""When the trainer forgets a device, pure: a device silent for ``score.expire_after_s`` of event
time (the scorer's setting: one length of memory for the fleet) leaves the trainer's state, as
it leaves the scorer's, and its parameters are withdrawn from ``model.params`` with a tombstone.

Per bucket of devices the trainer keeps, beside the parameters, when it last heard each device
(the newest event time of its readings, learned or not) and the event-time timer it registered
(:class:`~fleetwatch.streaming.trainer.seen_state.Seen`): one per bucket, at the earliest
``last heard + expire_after`` among its devices. When it fires (the watermark passed it),
:func:`forget_due` drops the devices due — their parameters and all the bucket keeps of them,
their repeat state with it — and the next earliest is armed (:func:`arm_timer`). A reading
after that starts the device afresh, at version 1.

Why a tombstone: a device starting afresh restarts its versions, and every reader of
``model.params`` keeps the highest version per device, so a remembered version 57 would hide
the new version 1 for ever. The tombstone (a record of the device's key with no value) says
"forget this device's parameters" to each of them — the scorer drops them (it has usually
forgotten the device already), the API's materialiser deletes its row, the trainer's seeding and
the fleet models' table take only records after a device's last tombstone — and compaction then
removes the key from the topic altogether, so the topic does not keep the fleet's dead devices.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from fleetwatch.streaming.trainer.seen_state import Seen


def note(seen: Seen, heard: Iterable[tuple[str, int]]) -> None:
    """Devices heard, each with the newest event time of its readings in the batch."""
    devices = seen["devices"]
    for device_id, event_ms in heard:
        if device_id not in devices or event_ms > devices[device_id]:
            devices[device_id] = event_ms


def forget_due(
    params: MutableMapping[str, str], seen: Seen, watermark_ms: int, expire_after_ms: int
) -> list[str]:
    """The bucket's timer fired: the devices silent for ``expire_after_ms`` by the watermark
    leave ``params`` and ``seen``; returns them, in order. The registered timer is spent."""
    seen["timer_ms"] = None
    gone = sorted(
        device_id
        for device_id, last_ms in seen["devices"].items()
        if last_ms + expire_after_ms <= watermark_ms
    )
    for device_id in gone:
        del seen["devices"][device_id]
        seen["seqs"].pop(device_id, None)
        params.pop(device_id, None)
    return gone


def arm_timer(seen: Seen, expire_after_ms: int) -> int | None:
    """The timer to register for the bucket: when its earliest device is due, if earlier than
    the timer registered (``None``: none to register; a later registered one fires, finds
    nothing due and arms the next)."""
    if not seen["devices"]:
        return None
    due = min(seen["devices"].values()) + expire_after_ms
    if seen["timer_ms"] is not None and seen["timer_ms"] <= due:
        return None
    seen["timer_ms"] = due
    return due
