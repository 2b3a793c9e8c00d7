"""Quarantine: a device whose micro-batches keep failing is set aside, so that it costs the
fleet nothing while someone looks at it.

A device's micro-batch that raises (:func:`~fleetwatch.streaming.scorer.bucket_step.score_bucket`
catches it) leaves the device's state as it was before the batch, and its readings go to
``telemetry.deadletter`` with the reason. After :attr:`Rule.after_failures` such batches in a
row the device is *quarantined* for :attr:`Rule.hold_ms` (wall-clock time): its readings go to
the dead letters unscored, and its ``device.state`` record says ``quarantined``, with the
reason and until when. A batch that succeeds clears the count. The quarantine ends when its
time is up or when a lift record (:mod:`fleetwatch.contracts.quarantine`, written by the API's
``POST /devices/{device_id}/quarantine/lift``) newer than its start arrives on
``model.params``.

The fields live in the device's state (:class:`~fleetwatch.streaming.scorer.device_state.
DeviceScoringState`): ``failures``, ``quarantined_ms``, ``quarantined_until_ms`` and
``quarantine_reason``.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from fleetwatch.contracts.quarantine import lift_key, lift_value, lifted_device, newest_lift
from fleetwatch.streaming.scorer.device_state import DeviceScoringState

__all__ = ["Rule", "lift_key", "lift_value", "lifted_device", "newest_lift"]

MAX_REASON = 500
"""Characters of an exception's text kept as a reason."""


@dataclass(frozen=True)
class Rule:
    after_failures: int = 3
    hold_ms: int = 3_600_000


def reason_of(exc: BaseException) -> str:
    text = f"scoring failed: {type(exc).__name__}: {exc}".replace("\x00", "\\x00")
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def held(state: DeviceScoringState, now_ms: int) -> bool:
    """Whether the device is quarantined now; a quarantine whose time is up ends here."""
    until = state["quarantined_until_ms"]
    if until is None:
        return False
    if now_ms < int(until):
        return True
    release(state)
    return False


def failed(state: DeviceScoringState, reason: str, now_ms: int, rule: Rule) -> bool:
    """Count a failed batch; whether the device is quarantined by it."""
    state["failures"] = int(state["failures"]) + 1
    state["quarantine_reason"] = reason
    if state["failures"] < rule.after_failures:
        return False
    state["quarantined_ms"] = now_ms
    state["quarantined_until_ms"] = now_ms + rule.hold_ms
    state["status"] = "quarantined"
    return True


def succeeded(state: DeviceScoringState) -> None:
    if state["failures"]:
        state["failures"] = 0
        state["quarantine_reason"] = None


def lift(state: DeviceScoringState, lifted_ms: int) -> bool:
    """A lift record: whether it ended the device's quarantine (one older than the quarantine's
    start does not)."""
    since = state["quarantined_ms"]
    if state["quarantined_until_ms"] is None or since is None or lifted_ms < int(since):
        return False
    release(state)
    return True


def release(state: DeviceScoringState) -> None:
    state["failures"] = 0
    state["quarantined_ms"] = None
    state["quarantined_until_ms"] = None
    state["quarantine_reason"] = None
    opened = any(e.get("opened") for e in state["episodes"])
    state["status"] = "alerting" if opened else "ok"


_FIELDS = ("status", "failures", "quarantined_ms", "quarantined_until_ms", "quarantine_reason")
_fields = itemgetter(*_FIELDS)

Snapshot = tuple[Any, ...]
"""The values of the quarantine's fields (and the status), in the order of ``_FIELDS``."""


def snapshot(state: DeviceScoringState | None) -> Snapshot | None:
    """The quarantine's fields (and the status), to carry over a failed batch's undoing."""
    return None if state is None else _fields(state)


def restore(state: DeviceScoringState, saved: Snapshot | None) -> None:
    if saved is not None:
        for name, value in zip(_FIELDS, saved, strict=True):
            state[name] = value  # type: ignore[literal-required]
