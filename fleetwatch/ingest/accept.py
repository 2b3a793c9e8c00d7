"""One MQTT telemetry message → ``telemetry.raw`` records and dead letters. No I/O.

A payload is one reading (a JSON object) or a batch (a JSON array of readings). In a batch,
each reading stands alone: the good ones are accepted and each bad one becomes a dead letter
naming its index, so one broken reading never costs its neighbours. A dead letter always keeps
the whole raw payload as it arrived, with the reason in its headers.

Beyond the schema (``contracts.telemetry``), a reading must be plausible in time, judged on the
device's own clock (which may be off): it cannot be sent before it happened (``ts`` at most
one minute after ``sent``), it cannot have waited in a buffer for more than 30 days, the
device clock may be at most 7 days from the gateway's, and the corrected event time must be
after 2020-01-01.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from pydantic import ValidationError

from fleetwatch.contracts.identifiers import is_device_id
from fleetwatch.contracts.telemetry import (
    CompiledReading,
    Reading,
    decode_readings,
    encode_record,
    first_problem,
)
from fleetwatch.ingest.clock import ClockOffsets
from fleetwatch.ingest.errors import PayloadRejected, RejectKind

_MINUTE_MS = 60_000
_DAY_MS = 24 * 60 * _MINUTE_MS
MAX_SEND_BEFORE_EVENT_MS = _MINUTE_MS
MAX_BUFFERED_MS = 30 * _DAY_MS
MAX_CLOCK_SKEW_MS = 7 * _DAY_MS
EARLIEST_EVENT_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z
MAX_AHEAD_MS = 60_000
"""How far a corrected event time may lie after the reading's arrival at the gateway. A reading
happens before it arrives; the corrected time can be ahead only by the spread of network delays
— or because the device's clock just jumped forward and the offset estimate (a running median)
has not followed yet. Beyond this bound the event time is clamped to the arrival time (and the
offset applied says so), so that no device can move the scorer's watermark, which is shared by
every device, ahead of the gateway's clock."""
MAX_BATCH = 1_000
TOPICS_KEPT = 65_536
MAX_DEAD_LETTER_BYTES = 512 * 1024
"""The most of a rejected payload a dead letter keeps: half of Kafka's default record limit
(1 MB), so that a dead letter is always written. A longer payload is kept cut to this length,
its whole length and SHA-256 in the headers."""
MAX_REASONS = 50
"""The rejected readings of a batch whose reasons a dead letter lists (all are counted)."""

Headers = list[tuple[str, str | bytes | None]]


@dataclass(frozen=True)
class Accepted:
    key: bytes
    value: bytes
    timestamp_ms: int
    seq: int
    clamped: bool = False
    """Whether the corrected event time was clamped to the arrival time (:data:`MAX_AHEAD_MS`)."""
    clock_offset_ms: int = 0
    """The clock offset applied to the device's time (``event_ms - ts``)."""
    sent_ms: int | None = None
    """When the device says it sent the reading (its own clock)."""


@dataclass(frozen=True)
class DeadLetter:
    key: bytes
    value: bytes
    headers: Headers
    reason: str
    kinds: Mapping[RejectKind, int]
    """The readings of the message it stands for (a batch's rejected readings share one), by
    the kind of their rejection."""

    @property
    def readings(self) -> int:
        return sum(self.kinds.values())


@dataclass
class Outcome:
    accepted: list[Accepted] = field(default_factory=list)
    rejected: list[DeadLetter] = field(default_factory=list)


@lru_cache(maxsize=TOPICS_KEPT)
def device_from_topic(topic: str, root: str, channel: str = "telemetry") -> str:
    """The device id of ``{root}/{device_id}/{channel}``, or a rejection saying why not.
    Kept for the last :data:`TOPICS_KEPT` valid topics: a fleet's devices publish on the same
    topics again and again, and matching the device-id pattern on every message is needless
    work on the gateway's hot path."""
    prefix, suffix = root + "/", "/" + channel
    if not topic.startswith(prefix) or not topic.endswith(suffix):
        raise PayloadRejected(f"topic {topic!r} is not {root}/{{device_id}}/{channel}", "topic")
    device_id = topic[len(prefix) : -len(suffix)]
    if not is_device_id(device_id):
        raise PayloadRejected(
            f"device id {device_id!r} in topic {topic!r} is not a valid device id", "topic"
        )
    return device_id


def handle(
    topic: str,
    payload: bytes | bytearray,
    received_ms: int,
    root: str,
    max_bytes: int,
    clocks: ClockOffsets,
) -> Outcome:
    """Check one message: every reading in it is either accepted or dead-lettered, with a reason."""
    outcome = Outcome()
    try:
        device_id = device_from_topic(topic, root)
        items = _readings(payload, max_bytes)
    except PayloadRejected as exc:
        outcome.rejected.append(
            dead_letter(topic, payload, received_ms, str(exc), root, {exc.kind: 1})
        )
        return outcome
    if not isinstance(items, list):
        try:
            outcome.accepted.append(_record(device_id, _validate(items), received_ms, clocks))
        except PayloadRejected as exc:
            outcome.rejected.append(
                dead_letter(topic, payload, received_ms, str(exc), root, {exc.kind: 1})
            )
        return outcome
    problems: list[tuple[int, PayloadRejected]] = []
    for index, item in enumerate(items):
        try:
            outcome.accepted.append(_record(device_id, _validate(item), received_ms, clocks))
        except PayloadRejected as exc:
            problems.append((index, exc))
    if problems:
        outcome.rejected.append(_batch_dead_letter(topic, payload, received_ms, root, problems))
    return outcome


def _batch_dead_letter(
    topic: str,
    payload: bytes | bytearray,
    received_ms: int,
    root: str,
    problems: list[tuple[int, PayloadRejected]],
) -> DeadLetter:
    """One dead letter for every rejected reading of a batch: the payload once, the indexes
    and (up to :data:`MAX_REASONS`) the reasons in headers."""
    first, why = problems[0]
    reason = f"reading [{first}]: {why}"
    if len(problems) > 1:
        reason += f" (and {len(problems) - 1} more readings rejected)"
    kinds = Counter(exc.kind for _, exc in problems)
    dl = dead_letter(topic, payload, received_ms, reason, root, kinds)
    indexes = ",".join(str(i) for i, _ in problems[:MAX_REASONS])
    dl.headers.append(("fw.batch_index", indexes.encode()))
    reasons = [[i, str(r)] for i, r in problems[:MAX_REASONS]]
    dl.headers.append(("fw.batch_reasons", json.dumps(reasons).encode()))
    return dl


def _readings(payload: bytes | bytearray, max_bytes: int) -> object:
    """A reading, or a batch of them: checked already (:class:`CompiledReading`) where the
    compiled path takes them; else parsed JSON for :func:`_validate`, which says what is
    wrong with it."""
    if not payload:
        raise PayloadRejected("empty payload", "empty")
    if len(payload) > max_bytes:
        raise PayloadRejected(
            f"payload of {len(payload)} bytes exceeds the {max_bytes}-byte limit", "too_large"
        )
    checked = decode_readings(payload)
    if checked is not None and (not isinstance(checked, list) or 0 < len(checked) <= MAX_BATCH):
        return checked
    try:
        parsed = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise PayloadRejected(f"payload: Invalid JSON ({exc})", "json") from exc
    if isinstance(parsed, list):
        if not parsed:
            raise PayloadRejected(
                "empty batch: a batch payload needs at least one reading", "empty"
            )
        if len(parsed) > MAX_BATCH:
            raise PayloadRejected(
                f"batch of {len(parsed)} readings exceeds the limit of {MAX_BATCH}", "too_large"
            )
        return parsed
    if isinstance(parsed, dict):
        return parsed
    raise PayloadRejected(
        f"payload: a reading is a JSON object or an array of them, got {type(parsed).__name__}",
        "json",
    )


def _validate(item: object) -> Reading | CompiledReading:
    if isinstance(item, CompiledReading):
        return item
    if not isinstance(item, dict):
        raise PayloadRejected(f"a reading is a JSON object, got {type(item).__name__}", "schema")
    try:
        return Reading.model_validate(item, strict=True)
    except ValidationError as exc:
        raise PayloadRejected(first_problem(exc), "schema") from exc


def _record(
    device_id: str, reading: Reading | CompiledReading, received_ms: int, clocks: ClockOffsets
) -> Accepted:
    if reading.device_id is not None and reading.device_id != device_id:
        raise PayloadRejected(
            f"device_id {reading.device_id!r} in the payload is not {device_id!r} of the topic",
            "device_mismatch",
        )
    waited = reading.sent - reading.ts
    if -waited > MAX_SEND_BEFORE_EVENT_MS:
        raise PayloadRejected(
            f"ts is {-waited} ms after sent: a reading cannot be sent before it happens",
            "sent_before_event",
        )
    if waited > MAX_BUFFERED_MS:
        raise PayloadRejected(
            f"reading was buffered {waited / _DAY_MS:.1f} days; the limit is 30",
            "buffered_too_long",
        )
    skew = received_ms - reading.sent
    if abs(skew) > MAX_CLOCK_SKEW_MS:
        raise PayloadRejected(
            f"device clock is {skew / _DAY_MS:.1f} days off gateway time; limit 7", "clock_skew"
        )
    offset = clocks.observe(device_id, reading.sent, received_ms)
    event_ms = reading.ts + offset
    clamped = event_ms > received_ms + MAX_AHEAD_MS
    if clamped:
        offset = received_ms - reading.ts
        event_ms = received_ms
    if event_ms < EARLIEST_EVENT_MS:
        raise PayloadRejected(f"corrected event time {event_ms} is before 2020-01-01", "too_early")
    value = encode_record(
        device_id,
        reading.seq,
        event_ms,
        reading.ts,
        reading.sent,
        received_ms,
        offset,
        reading.metrics,
        reading.firmware,
        reading.status,
    )
    return Accepted(device_id.encode(), value, event_ms, reading.seq, clamped, offset, reading.sent)


def dead_letter(
    topic: str,
    payload: bytes | bytearray,
    received_ms: int,
    reason: str,
    root: str,
    kinds: Mapping[RejectKind, int],
) -> DeadLetter:
    """The raw bytes — whole up to :data:`MAX_DEAD_LETTER_BYTES`, else cut there, with the
    whole length and digest — with the reason and the MQTT topic in headers. ``kinds``: the
    readings it stands for by the kind of their rejection."""
    try:
        key = device_from_topic(topic, root).encode()
    except PayloadRejected:
        key = b""
    headers: Headers = [
        ("fw.reason", reason.encode()),
        ("fw.stage", b"gateway"),
        ("fw.mqtt_topic", topic.encode(errors="replace")[:1024]),
        ("fw.received_ms", str(received_ms).encode()),
    ]
    value, cut = capped(bytes(payload))
    return DeadLetter(key, value, headers + cut, reason, dict(kinds))


def capped(value: bytes) -> tuple[bytes, Headers]:
    """A dead letter's value: whole up to :data:`MAX_DEAD_LETTER_BYTES`, else cut there, with
    headers giving the whole length and its digest."""
    if len(value) <= MAX_DEAD_LETTER_BYTES:
        return value, []
    headers: Headers = [
        ("fw.payload_bytes", str(len(value)).encode()),
        ("fw.payload_sha256", hashlib.sha256(value).hexdigest().encode()),
    ]
    return value[:MAX_DEAD_LETTER_BYTES], headers
