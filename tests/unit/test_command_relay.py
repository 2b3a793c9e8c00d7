"""The command relay while MQTT is away: the publish is refused (paho raises), the relay goes
back to the command and tries it again later; the gateway's loop never stops on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from fleetwatch.contracts.commands import Command
from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest import commands
from fleetwatch.ingest.commands import CommandRelay


@dataclass
class Record:
    payload: bytes
    at: int

    def offset(self) -> int:
        return self.at

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self.payload

    def topic(self) -> str:
        return "device.commands"

    def partition(self) -> int:
        return 0


@dataclass
class FakeConsumer:
    records: list[Record]
    position: int = 0
    stored: list[int] = field(default_factory=list)

    def consume(self, n: int, timeout: float) -> list[Record]:
        out = self.records[self.position : self.position + n]
        self.position += len(out)
        return out

    def seek(self, tp: Any) -> None:
        self.position = tp.offset

    def store_offsets(self, msg: Record) -> None:
        self.stored.append(msg.at)

    def commit(self, asynchronous: bool = True) -> None:
        pass


class Broker:
    """A client whose connection is down until ``up`` (paho's return code for that case)."""

    def __init__(self) -> None:
        self.up = False
        self.sent: list[str] = []

    def publish(self, topic: str, payload: bytes, qos: int) -> mqtt.MQTTMessageInfo:
        info = mqtt.MQTTMessageInfo(len(self.sent))
        if not self.up:
            info.rc = mqtt.MQTT_ERR_NO_CONN
            return info
        self.sent.append(topic)
        info._set_as_published()
        return info


def command(i: int) -> bytes:
    return (
        Command(command_id=f"c{i}", device_id="d1", name="reboot", issued_ms=1_800_000_000_000)
        .model_dump_json()
        .encode()
    )


def relay(broker: Broker, records: list[Record]) -> CommandRelay:
    out = CommandRelay.__new__(CommandRelay)  # no Kafka: its consumer is the fake
    out.settings, out.client = Settings(), broker  # type: ignore[assignment]
    out.consumer = FakeConsumer(records)  # type: ignore[assignment]
    out.relayed = out.invalid = 0
    out.retry_at = 0.0
    out.metrics = None
    return out


def test_commands_wait_for_mqtt_and_go_out_once_it_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("fleetwatch.ingest.commands.time.monotonic", lambda: now[0])
    broker = Broker()
    r = relay(broker, [Record(command(i), i) for i in range(3)])
    assert r.pump() == 0  # refused: no exception, nothing stored
    assert r.consumer.stored == []  # type: ignore[attr-defined]
    now[0] += commands.RETRY_S / 2
    assert r.pump() == 0, "not retried before RETRY_S"
    broker.up = True
    assert r.pump() == 0
    now[0] += commands.RETRY_S
    assert r.pump() == 3
    assert r.consumer.stored == [0, 1, 2]  # type: ignore[attr-defined]
    assert broker.sent == ["devices/d1/commands"] * 3
    assert r.relayed == 3
