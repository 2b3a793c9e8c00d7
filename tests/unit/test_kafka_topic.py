"""A topic read to its end, on a fake consumer: each partition from its first record to the
end it had when the read began, then the readers built on it (the parameter table, the alert
events a replay compares, the alerts ``sim eval`` scores)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from fleetwatch import kafka_topic
from fleetwatch.contracts import model_params
from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.model_params import encode_champion, encode_device
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.fleet.publish import latest_records, read_table
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.models import params
from fleetwatch.simulator.alert_source import read_alerts
from fleetwatch.simulator.errors import SimulatorError
from fleetwatch.streaming.scorer.replay import read_events

Record = tuple[bytes | None, bytes | None]
BROKER = KafkaSettings(bootstrap_servers="broker")


@dataclass
class FakeMessage:
    p: int
    o: int
    k: bytes | None
    v: bytes | None

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v


@dataclass
class FakeConsumer:
    """Partition → (first offset, its records); ``late`` records arrive once reading started."""

    topic: str
    partitions: dict[int, tuple[int, list[Record]]]
    late: dict[int, list[Record]] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    closed: bool = False

    def __call__(self, config: dict[str, Any]) -> FakeConsumer:
        assert config["enable.auto.commit"] is False
        return self

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = SimpleNamespace(partitions=dict.fromkeys(self.partitions), error=None)
        return SimpleNamespace(topics={self.topic: meta} if topic == self.topic else {})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        low, records = self.partitions[tp.partition]
        return low, low + len(records)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = {tp.partition: tp.offset for tp in tps}
        for p, extra in self.late.items():
            self.partitions[p][1].extend(extra)

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        out = []
        for p, at in self.positions.items():
            low, records = self.partitions[p]
            for offset in range(at, min(low + len(records), at + 2)):  # two at a time
                out.append(FakeMessage(p, offset, *records[offset - low]))
            self.positions[p] = at + len(out)
        return out

    def close(self) -> None:
        self.closed = True


def fake(monkeypatch: pytest.MonkeyPatch, consumer: FakeConsumer) -> FakeConsumer:
    monkeypatch.setattr(kafka_topic, "Consumer", consumer)
    return consumer


def test_every_record_up_to_the_end_when_the_read_began(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = fake(
        monkeypatch,
        FakeConsumer(
            "t",
            {
                0: (0, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]),
                1: (5, []),
                2: (7, [(b"c", None)]),
            },
            late={0: [(b"a", b"4")]},
        ),
    )
    records = list(read_to_end(BROKER, "t", "g"))
    assert sorted(records, key=str) == sorted(
        [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", None)], key=str
    )
    assert consumer.closed


def test_no_such_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = fake(monkeypatch, FakeConsumer("t", {}))
    with pytest.raises(LookupError, match="no topic 'x'"):
        read_to_end(BROKER, "x", "g")
    assert consumer.closed


def test_a_partition_that_stops_short_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = fake(monkeypatch, FakeConsumer("t", {0: (0, [(b"a", b"1")])}))
    consumer.consume = lambda num_messages, timeout: []  # type: ignore[method-assign]
    ticks = iter(range(100))
    monkeypatch.setattr(kafka_topic, "time", SimpleNamespace(monotonic=lambda: next(ticks)))
    with pytest.raises(TimeoutError, match="1 partitions unread"):
        list(read_to_end(BROKER, "t", "g", timeout_s=5))
    assert consumer.closed


def test_the_parameter_table_is_the_latest_good_record_per_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings()
    old = {"kind": "pca", "schema": 1, "version": 1, "trained_from_ms": 1, "trained_to_ms": 2}
    new = old | {"version": 2}
    device = [encode_device("d1", params.dumps(p), 5).encode() for p in (old, new)]
    champion = encode_champion("t", "fleetwatch-t", 3, old, 1, 5).encode()
    records: list[Record] = [
        (b"d1", device[0]),
        (b"d1", device[1]),
        (b"d2", b"{broken"),
        (b"d3", None),
        (None, encode_device("d4", params.dumps(old), 5).encode()),
        (fleet_key("t").encode(), champion),
    ]
    fake(monkeypatch, FakeConsumer(settings.topics.model_params, {0: (0, records)}))
    table = read_table(settings)
    assert sorted(table) == ["d1", "d4", fleet_key("t")]
    assert table["d1"]["version"] == 2
    assert table[fleet_key("t")]["params"] == old


def test_each_key_keeps_its_newest_good_record_and_only_that_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = {"kind": "pca", "schema": 1, "trained_from_ms": 1, "trained_to_ms": 2}
    versions = [encode_device("d1", params.dumps(base | {"version": v}), 5) for v in range(1, 6)]
    records: list[Record] = [
        *((b"d1", v.encode()) for v in versions),
        (b"d1", b"{broken"),  # the newest breaks the contract: the one before it stands
        (b"d2", versions[0].replace('"d1"', '"d2"').encode()),
        (b"d2", None),  # forgotten
        (b"d3", None),
        (b"d3", versions[1].replace('"d1"', '"d3"').encode()),  # back after a tombstone
    ]
    decoded: list[bytes] = []
    real = model_params.decode

    def counted(value: bytes, key: bytes | None) -> model_params.ParamsRecord:
        decoded.append(value)
        return real(value, key)

    monkeypatch.setattr(model_params, "decode", counted)
    table = latest_records("model.params", records)
    assert sorted(table) == ["d1", "d3"]
    assert table["d1"]["version"] == 5
    assert table["d3"]["version"] == 2
    # d1's broken record and its newest good one, d3's one: not every version ever published
    assert len(decoded) == 3


def test_no_parameter_topic_is_an_empty_table(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, FakeConsumer("elsewhere", {}))
    assert read_table(Settings()) == {}


def test_alert_events_skip_what_is_not_an_event(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[Record] = [
        (b"d1", json.dumps({"event_id": "a.0"}).encode()),
        (b"d1", b"[1]"),
        (b"d1", b"{broken"),
        (b"d1", None),
    ]
    fake(monkeypatch, FakeConsumer("alerts-b", {0: (3, events)}))
    assert read_events(BROKER, "alerts-b") == [{"event_id": "a.0"}]


def test_sim_eval_reads_the_alerts_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    event = json.dumps({"event_id": "a.0"}).encode()
    fake(monkeypatch, FakeConsumer(settings.topics.alerts, {0: (0, [(b"d1", event)])}))
    assert read_alerts(settings) == [{"event_id": "a.0"}]
    fake(monkeypatch, FakeConsumer("elsewhere", {}))
    with pytest.raises(SimulatorError, match="no topic"):
        read_alerts(settings)
