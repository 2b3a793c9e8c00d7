"""A device that keeps exceeding its rate is reported: its dead letters say ``fw.kind:
rate_limited`` (what the API counts), the gateway's gauge counts the devices over their rate in
the last minute (bounded: no device id in a label), and the warning comes once a minute."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import Gauge

from fleetwatch.contracts.deadletter import KIND, RATE_LIMITED, RATE_LIMITED_RUN_S
from fleetwatch.contracts.settings import GatewaySettings, Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.gateway import Gateway
from fleetwatch.ingest.metrics import GatewayMetrics, OverRate
from tests.unit.test_gateway_metrics import NOW, FakeClient, message, receive, value
from tests.unit.test_gateway_rate import Clock

GAUGE = "fleetwatch_gateway_rate_limited_devices"


def test_the_devices_over_their_rate_are_counted_until_a_minute_after_their_last() -> None:
    clock, metrics = Clock(), GatewayMetrics()
    over = OverRate(metrics.rate_limited_devices, clock=clock)
    assert [over.hit("a"), over.hit("a"), over.hit("b")] == [True, False, True]
    assert value(metrics, GAUGE) == 2
    clock.s += RATE_LIMITED_RUN_S - 1
    assert not over.hit("a")  # still the same run: no second warning yet
    clock.s += 1
    over.sweep()
    assert value(metrics, GAUGE) == 1  # b's last was a minute ago; a's a second ago
    clock.s += 1
    assert over.hit("a")  # over its rate for a minute: warned again
    clock.s += RATE_LIMITED_RUN_S
    over.sweep()
    assert (value(metrics, GAUGE), len(over)) == (0, 0)


def test_memory_follows_the_devices_over_their_rate() -> None:
    clock = Clock()
    over = OverRate(Gauge("g", "g", registry=None), clock=clock)
    for i in range(1000):
        over.hit(f"d{i}")
    clock.s += RATE_LIMITED_RUN_S
    over.sweep()
    assert len(over) == 0


def test_a_flooding_devices_dead_letters_say_rate_limited_and_the_gauge_counts_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(gateway=GatewaySettings(device_rate=1.0, device_burst=5))
    gw = Gateway(settings, clock=lambda: NOW, metrics=GatewayMetrics())
    produced: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gw, "_produce", lambda *args: produced.append(args))
    client = FakeClient()
    flood, quiet = settings.mqtt.telemetry_topic("flood"), settings.mqtt.telemetry_topic("quiet")
    for seq in range(30):
        receive(gw, client, message(flood, reading_payload(seq, NOW - 5, NOW, {"t": 1.0}), seq))
    receive(gw, client, message(quiet, reading_payload(0, NOW - 5, NOW, {"t": 1.0}), 99))
    dead = [r for r in produced if r[0] == settings.topics.telemetry_deadletter]
    assert len(dead) >= 20
    assert all(r[1] == b"flood" and dict(r[5])[KIND] == RATE_LIMITED.encode() for r in dead)
    assert value(gw.metrics, GAUGE) == 1  # flood, not quiet
    warnings = [r for r in caplog.records if "exceeds its rate" in r.getMessage()]
    assert len(warnings) == 1
