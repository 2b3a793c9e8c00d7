import json

import pytest

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.accept import accept, dead_letter, device_from_topic
from fleetwatch.ingest.errors import PayloadRejected

ROOT = "devices"
MAX = 1024


def test_an_accepted_reading_is_keyed_by_device_and_stamped() -> None:
    payload = reading_payload(3, 1_000, 1_005, {"temperature": 20.0})
    ok = accept("devices/pump-7/telemetry", payload, 2_000, ROOT, MAX)
    record = json.loads(ok.value)
    assert ok.key == b"pump-7"
    assert ok.timestamp_ms == 1_000
    assert record["device_id"] == "pump-7"
    assert (record["device_event_ms"], record["device_sent_ms"], record["received_ms"]) == (
        1_000,
        1_005,
        2_000,
    )


def test_a_nested_root_is_understood() -> None:
    assert device_from_topic("site-a/devices/d1/telemetry", "site-a/devices") == "d1"


@pytest.mark.parametrize(
    ("topic", "payload", "reason"),
    [
        ("devices/d1/status", b"{}", "is not devices/{device_id}/telemetry"),
        ("devices/a/b/telemetry", b"{}", "not a valid device id"),
        ("other/d1/telemetry", b"{}", "is not devices/{device_id}/telemetry"),
        ("devices/d1/telemetry", b"", "empty payload"),
        ("devices/d1/telemetry", b"x" * (MAX + 1), "exceeds the 1024-byte limit"),
        ("devices/d1/telemetry", b"{not json", "payload: Invalid JSON"),
    ],
)
def test_a_rejection_says_why(topic: str, payload: bytes, reason: str) -> None:
    with pytest.raises(PayloadRejected) as caught:
        accept(topic, payload, 0, ROOT, MAX)
    assert reason in str(caught.value)


def test_a_dead_letter_keeps_the_raw_bytes_and_the_reason() -> None:
    raw = b"\xff\xfe garbage"
    dl = dead_letter("devices/d9/telemetry", raw, 42, "payload: Invalid JSON", ROOT)
    headers = dict(dl.headers)
    assert dl.value == raw
    assert dl.key == b"d9"
    assert headers["fw.reason"] == b"payload: Invalid JSON"
    assert headers["fw.mqtt_topic"] == b"devices/d9/telemetry"
    assert headers["fw.received_ms"] == b"42"


def test_a_dead_letter_from_an_odd_topic_has_an_empty_key() -> None:
    assert dead_letter("nowhere", b"{}", 0, "bad topic", ROOT).key == b""
