"""Per-device rate limits: a token bucket a device, and the gateway dead-lettering a device's
messages over its rate before parsing them, while every other device is untouched."""

from __future__ import annotations

from typing import Any

import pytest

from fleetwatch.contracts.settings import GatewaySettings, Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.gateway import Gateway
from fleetwatch.ingest.metrics import GatewayMetrics
from fleetwatch.ingest.rate import PRUNE_EVERY, DeviceRates
from tests.unit.test_gateway_metrics import NOW, FakeClient, message, receive, value


class Clock:
    def __init__(self) -> None:
        self.s = 100.0

    def __call__(self) -> float:
        return self.s


def test_a_device_has_its_burst_then_its_rate_and_no_more() -> None:
    clock = Clock()
    rates = DeviceRates(rate=2.0, burst=3, clock=clock)
    assert [rates.admit("a") for _ in range(5)] == [True, True, True, False, False]
    assert rates.admit("b")  # another device's bucket is its own
    clock.s += 0.5  # one token back at 2 a second
    assert [rates.admit("a") for _ in range(2)] == [True, False]
    clock.s += 60  # refilled to the burst, not beyond
    assert [rates.admit("a") for _ in range(4)] == [True, True, True, False]


def test_quiet_devices_buckets_are_dropped() -> None:
    clock = Clock()
    rates = DeviceRates(rate=1.0, burst=2, clock=clock)
    for i in range(10):
        rates.admit(f"d{i}")
    clock.s += 3  # full again: the same as no bucket
    for _ in range(PRUNE_EVERY - 10):
        rates.admit("busy")
    assert len(rates) == 1


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        DeviceRates(rate=0, burst=1)


def test_a_flooding_device_is_dead_lettered_and_the_others_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(gateway=GatewaySettings(device_rate=1.0, device_burst=5))
    gw = Gateway(settings, clock=lambda: NOW, metrics=GatewayMetrics())
    produced: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gw, "_produce", lambda *args: produced.append(args))
    client = FakeClient()
    flood, quiet = settings.mqtt.telemetry_topic("flood"), settings.mqtt.telemetry_topic("quiet")
    for seq in range(50):
        payload = reading_payload(seq, NOW - 5, NOW, {"t": 1.0})
        receive(gw, client, message(flood, payload, seq + 1))
        if seq % 10 == 0:
            receive(gw, client, message(quiet, payload, 1000 + seq))
    raw, dead = settings.topics.telemetry_raw, settings.topics.telemetry_deadletter
    by_topic: dict[str, list[tuple[Any, ...]]] = {raw: [], dead: []}
    for record in produced:
        by_topic[record[0]].append(record)
    assert [r[1] for r in by_topic[raw]].count(b"quiet") == 5  # every quiet reading
    assert [r[1] for r in by_topic[raw]].count(b"flood") <= 6  # its burst (and a refill)
    refused = by_topic[dead]
    assert len(refused) + [r[1] for r in by_topic[raw]].count(b"flood") == 50
    headers = dict(refused[0][5])
    assert headers["fw.reason"] == b"device flood exceeds its rate of 1 messages/s (burst 5)"
    kind = {"reason": "rate_limited"}
    assert value(gw.metrics, "fleetwatch_gateway_dead_lettered_total", **kind) == len(refused)
