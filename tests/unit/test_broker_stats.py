"""Mosquitto's ``$SYS`` figures bridged into the gateway's metrics: parsing, exposition, and the
example ACL that lets the gateway's account read them."""

from __future__ import annotations

from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.broker_stats import SYS_TOPICS, BrokerStats, SysBridge, sys_value
from fleetwatch.stack.credentials import GATEWAY, render_acl

ACL_EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto" / "acl.example"


@pytest.mark.parametrize(
    ("topic", "payload", "name", "expected"),
    [
        ("$SYS/broker/clients/connected", b"12", "clients_connected", 12.0),
        ("$SYS/broker/messages/received", b"1048576", "messages_received", 1048576.0),
        ("$SYS/broker/publish/messages/dropped", b"0", "publish_messages_dropped", 0.0),
        ("$SYS/broker/store/messages/count", b"311", "stored_messages", 311.0),
        # a per-minute load average, as per second
        (
            "$SYS/broker/load/messages/received/1min",
            b"6000.50",
            "messages_received_per_second",
            100.00833333333334,
        ),
        ("$SYS/broker/uptime", b"86400 seconds", "uptime_seconds", 86400.0),
    ],
)
def test_a_sys_message_is_a_value_of_its_metric(
    topic: str, payload: bytes, name: str, expected: float
) -> None:
    parsed = sys_value(topic, payload)
    assert parsed is not None
    metric, value = parsed
    assert metric.name == name
    assert value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("topic", "payload"),
    [
        ("$SYS/broker/version", b"mosquitto version 2.0.11"),  # not bridged
        ("$SYS/broker/clients/connected", b""),
        ("$SYS/broker/clients/connected", b"many"),
        ("devices/d1/telemetry", b"1"),
    ],
)
def test_other_topics_and_non_numbers_are_ignored(topic: str, payload: bytes) -> None:
    assert sys_value(topic, payload) is None


def test_totals_are_counters_and_levels_gauges_in_the_exposition() -> None:
    registry = CollectorRegistry()
    stats = BrokerStats()
    registry.register(stats)
    assert generate_latest(registry) == b"", "nothing before the broker has published"
    assert stats.update("$SYS/broker/messages/sent", b"40")
    assert stats.update("$SYS/broker/clients/connected", b"3")
    assert not stats.update("$SYS/broker/version", b"mosquitto version 2.0.11")
    text = generate_latest(registry).decode()
    assert "# TYPE fleetwatch_mosquitto_messages_sent_total counter" in text
    assert "fleetwatch_mosquitto_messages_sent_total 40.0" in text
    assert "# TYPE fleetwatch_mosquitto_clients_connected gauge" in text
    assert "fleetwatch_mosquitto_clients_connected 3.0" in text
    stats.update("$SYS/broker/clients/connected", b"4")
    assert registry.get_sample_value("fleetwatch_mosquitto_clients_connected") == 4
    stats.clear()
    assert generate_latest(registry) == b"", "a lost broker's last figures are not served"


def test_the_bridge_takes_its_messages_and_forgets_them_when_the_broker_goes() -> None:
    registry = CollectorRegistry()
    bridge = SysBridge(Settings(), registry)
    msg = mqtt.MQTTMessage(0, b"$SYS/broker/clients/connected")
    msg.payload = b"7"
    bridge._on_message(bridge.client, None, msg)
    assert registry.get_sample_value("fleetwatch_mosquitto_clients_connected") == 7
    bridge._on_disconnect(bridge.client, None, None, None, None)
    assert registry.get_sample_value("fleetwatch_mosquitto_clients_connected") is None


def test_counters_the_broker_has_not_published_yet_are_zero_once_connected() -> None:
    registry = CollectorRegistry()
    bridge = SysBridge(Settings(), registry)
    assert registry.get_sample_value("fleetwatch_mosquitto_publish_messages_dropped_total") is None

    class Reason:
        is_failure = False

    class Client:
        def subscribe(self, topics: object) -> None:
            pass

    bridge._on_connect(Client(), None, None, Reason(), None)  # type: ignore[arg-type]
    dropped = "fleetwatch_mosquitto_publish_messages_dropped_total"
    assert registry.get_sample_value(dropped) == 0  # never moved: never published
    assert registry.get_sample_value("fleetwatch_mosquitto_clients_connected") is None
    msg = mqtt.MQTTMessage(0, b"$SYS/broker/publish/messages/dropped")
    msg.payload = b"3"
    bridge._on_message(bridge.client, None, msg)
    assert registry.get_sample_value(dropped) == 3


def test_every_bridged_topic_is_under_sys_broker_and_named_in_base_units() -> None:
    assert all(topic.startswith("$SYS/broker/") for topic in SYS_TOPICS)
    names = [t.name for t in SYS_TOPICS.values()]
    assert len(set(names)) == len(names)
    assert not any(t.name.endswith("_total") for t in SYS_TOPICS.values())
    assert all("minute" not in t.name for t in SYS_TOPICS.values())


def gateway_section(acl: str) -> list[str]:
    """The lines of the gateway account's section of an ACL."""
    section: list[str] = []
    for line in acl.splitlines():
        if line.startswith("user "):
            if section:
                break
            section = [line] if line == f"user {GATEWAY}" else []
        elif section and line.strip():
            section.append(line.strip())
    return section


@pytest.mark.parametrize(
    "acl", [ACL_EXAMPLE.read_text(), render_acl("devices")], ids=["example", "rendered"]
)
def test_the_gateways_account_may_read_the_broker_figures(acl: str) -> None:
    section = gateway_section(acl)
    assert section[0] == f"user {GATEWAY}"
    assert {"topic read $SYS/#", "topic read $SYS/broker/#"} & set(section)
