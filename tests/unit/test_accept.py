import hashlib
import json

import pytest

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.accept import (
    EARLIEST_EVENT_MS,
    MAX_AHEAD_MS,
    MAX_DEAD_LETTER_BYTES,
    MAX_REASONS,
    Outcome,
    device_from_topic,
    handle,
)
from fleetwatch.ingest.clock import ClockOffsets

ROOT = "devices"
MAX = 4096
NOW = 1_800_000_000_000


def run(
    topic: str, payload: bytes, received: int = NOW, clocks: ClockOffsets | None = None
) -> Outcome:
    return handle(topic, payload, received, ROOT, MAX, clocks or ClockOffsets())


def good(seq: int = 1, ts: int = NOW - 50, sent: int = NOW - 10, **metrics: float) -> bytes:
    return reading_payload(seq, ts, sent, metrics or {"temperature": 20.0})


def test_an_accepted_reading_is_keyed_by_device_and_keeps_its_three_times() -> None:
    out = run("devices/pump-7/telemetry", good(3))
    (ok,) = out.accepted
    record = json.loads(ok.value)
    assert not out.rejected
    assert ok.key == b"pump-7"
    assert (record["device_event_ms"], record["device_sent_ms"], record["received_ms"]) == (
        NOW - 50,
        NOW - 10,
        NOW,
    )


def test_event_time_is_corrected_by_the_device_clock_offset() -> None:
    clocks = ClockOffsets()
    skew = 3 * 3600 * 1000  # the device clock is three hours behind
    out = run("devices/d1/telemetry", good(ts=NOW - skew - 40, sent=NOW - skew), clocks=clocks)
    record = json.loads(out.accepted[0].value)
    assert record["clock_offset_ms"] == skew
    assert record["event_ms"] == NOW - 40
    assert out.accepted[0].timestamp_ms == NOW - 40
    assert record["device_event_ms"] == NOW - skew - 40


def test_a_nested_root_is_understood() -> None:
    assert device_from_topic("site-a/devices/d1/telemetry", "site-a/devices") == "d1"


def test_a_batch_accepts_the_good_readings_and_dead_letters_the_bad_ones_once() -> None:
    batch = [json.loads(good(1)), {"v": 1, "seq": 2}, json.loads(good(3)), "nope"]
    payload = json.dumps(batch).encode()
    out = run("devices/d1/telemetry", payload)
    assert [json.loads(a.value)["seq"] for a in out.accepted] == [1, 3]
    (dl,) = out.rejected
    assert dl.readings == 2
    assert dl.value == payload
    assert dl.reason.startswith("reading [1]: ")
    assert dl.reason.endswith("(and 1 more readings rejected)")
    headers = dict(dl.headers)
    assert headers["fw.batch_index"] == b"1,3"
    reasons = json.loads(headers["fw.batch_reasons"] or b"")
    assert [index for index, _ in reasons] == [1, 3]


def test_a_batch_of_many_bad_readings_is_one_dead_letter_not_one_per_reading() -> None:
    """A 1,000-reading batch of bad readings once wrote the whole payload 1,000 times."""
    payload = json.dumps([{"v": 1, "seq": k} for k in range(1000)]).encode()
    out = handle("devices/d1/telemetry", payload, NOW, ROOT, 1_000_000, ClockOffsets())
    (dl,) = out.rejected
    assert dl.readings == 1000
    assert len(json.loads(dict(dl.headers)["fw.batch_reasons"] or b"")) == MAX_REASONS


def test_an_oversized_payload_is_dead_lettered_cut_to_fit_a_kafka_record() -> None:
    """A 1.5 MB message once made a dead letter Kafka refused (MSG_SIZE_TOO_LARGE), which
    stopped the gateway's intake for every device."""
    payload = b"x" * 1_500_000
    (dl,) = handle(
        "devices/d1/telemetry", payload, NOW, "devices", 2_000_000, ClockOffsets()
    ).rejected
    assert len(dl.value) == MAX_DEAD_LETTER_BYTES
    headers = dict(dl.headers)
    assert headers["fw.payload_bytes"] == b"1500000"
    assert headers["fw.payload_sha256"] == hashlib.sha256(payload).hexdigest().encode()


@pytest.mark.parametrize(
    ("topic", "payload", "reason"),
    [
        ("devices/d1/status", good(), "is not devices/{device_id}/telemetry"),
        ("devices/a/b/telemetry", good(), "not a valid device id"),
        ("other/d1/telemetry", good(), "is not devices/{device_id}/telemetry"),
        ("devices/d1/telemetry", b"", "empty payload"),
        ("devices/d1/telemetry", b"x" * (MAX + 1), "exceeds the 4096-byte limit"),
        ("devices/d1/telemetry", b"{not json", "payload: Invalid JSON"),
        ("devices/d1/telemetry", b"[]", "empty batch"),
        ("devices/d1/telemetry", b"42", "got int"),
        (
            "devices/d1/telemetry",
            good(ts=NOW, sent=NOW - 120_000),
            "cannot be sent before it happens",
        ),
        ("devices/d1/telemetry", good(ts=NOW - 40 * 86_400_000, sent=NOW), "buffered 40.0 days"),
        (
            "devices/d1/telemetry",
            good(ts=NOW - 9 * 86_400_000, sent=NOW - 9 * 86_400_000),
            "9.0 days off",
        ),
        (
            "devices/d1/telemetry",
            b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":NaN}}',
            "metrics.t",
        ),
        ("devices/d1/telemetry", b'{"v":1,"seq":true,"ts":1,"sent":1,"metrics":{"t":1}}', "seq"),
        ("devices/d1/telemetry", b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1},"x":1}', "x:"),
    ],
)
def test_a_rejection_says_why_and_keeps_the_raw_bytes(
    topic: str, payload: bytes, reason: str
) -> None:
    out = run(topic, payload)
    (dl,) = out.rejected
    assert not out.accepted
    assert reason in dl.reason
    assert dl.value == payload
    assert dict(dl.headers)["fw.reason"] == dl.reason.encode()
    assert dict(dl.headers)["fw.stage"] == b"gateway"
    assert dict(dl.headers)["fw.mqtt_topic"] == topic.encode()


def test_a_payload_naming_another_device_is_refused() -> None:
    payload = reading_payload(1, NOW - 5, NOW, {"t": 1.0}, device_id="d2")
    (dl,) = run("devices/d1/telemetry", payload).rejected
    assert "'d2' in the payload is not 'd1'" in dl.reason


def test_an_event_before_2020_is_refused_after_correction() -> None:
    old = EARLIEST_EVENT_MS - 1_000
    (dl,) = run("devices/d1/telemetry", good(ts=old, sent=old + 10), received=old + 20).rejected
    assert "before 2020-01-01" in dl.reason


def test_a_dead_letter_from_an_odd_topic_has_an_empty_key() -> None:
    assert run("nowhere", b"{}").rejected[0].key == b""


def test_a_clock_that_jumps_ahead_cannot_move_event_time_past_arrival() -> None:
    """The offset is a running median: right after a device's clock jumps an hour ahead it
    still holds the old offset, which would put the corrected event time an hour in the
    future (and the scorer's watermark, shared by every device, with it)."""
    clocks = ClockOffsets()
    for i in range(10):  # a device in step with the gateway
        t = NOW - 10_000 + i * 1000
        out = run("devices/d1/telemetry", good(i, ts=t - 30, sent=t), received=t + 5, clocks=clocks)
        assert not out.accepted[0].clamped
    jump = 3600 * 1000
    received = NOW + 1000
    out = run(
        "devices/d1/telemetry",
        good(11, ts=received - 30 + jump, sent=received + jump),
        received=received,
        clocks=clocks,
    )
    (ok,) = out.accepted
    record = json.loads(ok.value)
    assert ok.clamped
    assert record["event_ms"] == ok.timestamp_ms == received
    assert record["clock_offset_ms"] == received - record["device_event_ms"]
    assert not out.rejected, "clamped, not lost"


def test_event_time_just_after_arrival_is_kept_as_corrected() -> None:
    clocks = ClockOffsets()
    for i in range(3):  # earlier, slower deliveries set the offset (a median) 2 s high
        slow = NOW - 9000 + i * 1000
        run("devices/d1/telemetry", good(i, ts=slow - 2030, sent=slow - 2000), slow, clocks)
    out = run("devices/d1/telemetry", good(9, ts=NOW - 10, sent=NOW), NOW, clocks)
    (ok,) = out.accepted
    assert not ok.clamped
    assert ok.timestamp_ms == NOW - 10 + 2000  # ahead of arrival by less than MAX_AHEAD_MS
    assert ok.timestamp_ms - NOW < MAX_AHEAD_MS
