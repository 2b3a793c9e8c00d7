"""Per-device rate limits: a token bucket a device, refilled on the device's own clock and
held to the gateway's, and the gateway dead-lettering a device's messages over its rate while
every other device is untouched."""

from __future__ import annotations

from typing import Any

import pytest

from fleetwatch.contracts.settings import GatewaySettings, Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.gateway import Gateway
from fleetwatch.ingest.metrics import GatewayMetrics
from fleetwatch.ingest.rate import DRIFT, PRUNE_EVERY, DeviceRates
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


def test_a_backlog_delivered_at_once_counts_at_the_pace_it_was_published() -> None:
    clock = Clock()
    rates = DeviceRates(rate=10.0, burst=5, backlog_s=600, clock=clock)
    sent_ms = 1_000_000
    # the gateway was away for 5 minutes; the device published 20 a second (twice its rate)
    # for the first 10 s, then 1 a second; all of it arrives in the same instant
    backlog = [sent_ms + i * 50 for i in range(200)] + [
        sent_ms + 10_000 + i * 1000 for i in range(290)
    ]
    admitted = [rates.admit("d", t) for t in backlog]
    # the 10 s at twice the rate: the burst, then 10 a second of its clock; the rest: all
    assert admitted[:200].count(True) == pytest.approx(5 + 100, abs=1)
    assert all(admitted[200:])
    # the same messages counted on arrival would have been the burst alone
    on_arrival = DeviceRates(rate=10.0, burst=5, clock=clock)
    assert sum(on_arrival.admit("e") for _ in backlog) == 5


def test_a_device_lying_about_its_clock_gains_its_backlog_allowance_and_no_more() -> None:
    clock = Clock()
    rates = DeviceRates(rate=10.0, burst=5, backlog_s=60, clock=clock)
    admitted = 0
    sent_ms = 1_000_000
    for _ in range(100):  # 100 s of 500 messages a second, each claiming a second more
        for _ in range(500):
            sent_ms += 1000
            admitted += rates.admit("liar", sent_ms)
            clock.s += 0.002
    honest = 5 + 100 * 10  # its burst and 100 s at its rate
    allowance = 60 * 10 + 100 * DRIFT * 10  # the backlog allowance and the drift
    assert honest < admitted <= honest + allowance + 1


def test_a_flood_with_true_send_times_gets_its_rate() -> None:
    clock = Clock()
    rates = DeviceRates(rate=10.0, burst=5, backlog_s=600, clock=clock)
    admitted = 0
    for i in range(5000):  # 10 s at 500 a second, stamped truly
        admitted += rates.admit("flood", 1_000_000 + i * 2)
        clock.s += 0.002
    assert admitted == pytest.approx(5 + 10 * 10, abs=1)


def test_a_clock_stepping_back_does_not_stop_the_device() -> None:
    clock = Clock()
    rates = DeviceRates(rate=2.0, burst=2, backlog_s=600, clock=clock)
    sent_ms = 10_000_000
    assert [rates.admit("d", sent_ms) for _ in range(2)] == [True, True]
    sent_ms -= 3_600_000  # the device's clock is set back an hour
    admitted = []
    for _ in range(10):  # one a second, as before
        sent_ms += 1000
        clock.s += 1.0
        admitted.append(rates.admit("d", sent_ms))
    assert admitted[1:] == [True] * 9


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


def test_a_backlog_after_a_gateway_restart_is_not_dead_lettered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(gateway=GatewaySettings(device_rate=10.0, device_burst=5))
    gw = Gateway(settings, clock=lambda: NOW, metrics=GatewayMetrics())
    produced: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gw, "_produce", lambda *args: produced.append(args))
    client = FakeClient()
    topic = settings.mqtt.telemetry_topic("d")
    for seq in range(300):  # five minutes published a second apart, delivered at once
        sent = NOW - 300_000 + seq * 1000
        receive(gw, client, message(topic, reading_payload(seq, sent, sent, {"t": 1.0}), seq + 1))
    assert [r[0] for r in produced] == [settings.topics.telemetry_raw] * 300
