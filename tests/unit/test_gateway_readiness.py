"""The gateway's readiness: every worker connected and subscribed (the gauge, summed over the
workers' files as the supervisor serves it) and Kafka answering for telemetry.raw, whose
answer is kept a few seconds so probes do not each ask the broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry, values

from fleetwatch.ingest import metrics as gateway_metrics
from fleetwatch.ingest.metrics import GatewayMetrics, supervisor_registry
from fleetwatch.ingest.readiness import GatewayReadiness, KafkaTopicCheck


class Topic:
    def __init__(self, error: KafkaError | None = None) -> None:
        self.error = error


class Metadata:
    def __init__(self, topics: dict[str, Topic]) -> None:
        self.topics = topics


class FakeAdmin:
    def __init__(self) -> None:
        self.asked: list[tuple[str, float]] = []
        self.answer: Metadata | Exception = Metadata({"telemetry.raw": Topic()})

    def list_topics(self, topic: str, timeout: float) -> Metadata:
        self.asked.append((topic, timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_kafka_is_asked_with_a_2_s_timeout_and_its_answer_kept_for_5_s() -> None:
    admin, clock = FakeAdmin(), Clock()
    check = KafkaTopicCheck(lambda: admin, "telemetry.raw", clock=clock)
    assert check() == "ok"
    clock.now = 4.9
    admin.answer = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
    assert check() == "ok"  # cached
    assert admin.asked == [("telemetry.raw", 2.0)]
    clock.now = 5.0
    assert check().startswith("unreachable: ")
    admin.answer = Metadata({"telemetry.raw": Topic(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))})
    clock.now = 10.0
    assert check().startswith("no topic telemetry.raw: ")
    assert len(admin.asked) == 3


def test_ready_when_every_worker_is_subscribed_and_kafka_answers() -> None:
    metrics = GatewayMetrics()
    kafka = {"answer": "ok"}
    ready = GatewayReadiness(metrics.registry, 1, lambda: kafka["answer"])
    starting = ready()
    assert not starting.ready
    assert starting.detail == {"mqtt": "0/1 workers connected and subscribed", "kafka": "ok"}
    metrics.mqtt_connected.set(1)  # _on_connect: connected and subscribed
    assert ready().ready
    kafka["answer"] = "unreachable: broker down"
    assert ready().detail["kafka"] == "unreachable: broker down"
    assert not ready().ready


def test_the_supervisor_counts_the_workers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = supervisor_registry(tmp_path)
    ready = GatewayReadiness(registry, 2, lambda: "ok")
    monkeypatch.setenv(gateway_metrics.MULTIPROCESS_ENV, str(tmp_path))
    workers: list[Any] = []
    for pid in (101, 102):  # as two worker processes would, each into its own file
        monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda pid=pid: pid))  # type: ignore[no-untyped-call]
        worker = GatewayMetrics(CollectorRegistry())
        worker.mqtt_connected.set(1)
        workers.append(worker)
        if pid == 101:
            assert ready().detail["mqtt"] == "1/2 workers connected and subscribed"
    assert ready().ready
