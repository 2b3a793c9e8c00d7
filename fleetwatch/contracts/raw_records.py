"""What a ``telemetry.raw`` record must hold for a stage to read it as a reading: the one check
the scorer and the trainer apply to the records they consume (the gateway writes only such
records, but anything can be on a topic).

A record's value is a JSON object with integer ``seq`` and ``event_ms``, a ``metrics`` object of
numbers of magnitude at most :data:`~fleetwatch.contracts.limits.VALUE_LIMIT` (or null), every
integer within a signed 64-bit one, and labels within
:data:`~fleetwatch.contracts.limits.LABEL_LENGTH`. Fields an older record lacks are completed
as the gateway would have: ``device_event_ms`` from ``event_ms``, ``device_sent_ms`` from
``device_event_ms``, ``received_ms`` from ``event_ms``, ``clock_offset_ms`` 0.
"""

from __future__ import annotations

from typing import Any

from fleetwatch.contracts import wire
from fleetwatch.contracts.limits import INT64_MAX, LABEL_LENGTH, VALUE_LIMIT

INT64_MIN = -INT64_MAX - 1
_NUMBERS = (int, float)  # by exact type: JSON's true and false are no numbers here
_OPTIONAL_INTEGERS = ("device_event_ms", "device_sent_ms", "received_ms", "clock_offset_ms")


def read_record(text: str) -> dict[str, Any] | str:
    """The reading a record's value holds, or why it holds none."""
    try:
        r = wire.loads(text)
    except wire.RecordRejected as exc:
        return str(exc)
    if not isinstance(r, dict):
        return "not a JSON object"
    event_ms, metrics = r.get("event_ms"), r.get("metrics")
    seq = r.get("seq")
    if not (type(seq) is int and type(event_ms) is int and type(metrics) is dict):
        return "seq and event_ms must be integers and metrics an object"
    if not (INT64_MIN <= seq <= INT64_MAX and INT64_MIN <= event_ms <= INT64_MAX):
        return "seq or event_ms outside a signed 64-bit integer"
    if not all(
        v is None or (type(v) in _NUMBERS and -VALUE_LIMIT <= v <= VALUE_LIMIT)
        for v in metrics.values()
    ):
        return f"a metric value is not a number of magnitude at most {VALUE_LIMIT:g}"
    for name in _OPTIONAL_INTEGERS:
        value = r.get(name)
        if not (value is None or (type(value) is int and INT64_MIN <= value <= INT64_MAX)):
            return f"{name} is not a signed 64-bit integer"
    if r.get("device_event_ms") is None:
        r["device_event_ms"] = event_ms
    if r.get("device_sent_ms") is None:
        r["device_sent_ms"] = r["device_event_ms"]
    if r.get("received_ms") is None:
        r["received_ms"] = event_ms
    if r.get("clock_offset_ms") is None:
        r["clock_offset_ms"] = 0
    for name in ("firmware", "status"):
        label = r.get(name)
        if not isinstance(label, str):
            r[name] = None
        elif len(label) > LABEL_LENGTH or "\x00" in label:
            return f"{name} is longer than {LABEL_LENGTH} characters or holds a NUL"
    return r
