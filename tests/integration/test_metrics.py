"""The stages' metrics on the real stack: the gateway's and the broker figures it bridges, the
scorer's progress and per-batch counts from a real Spark query, the broker's JMX exporter.
Every stage still stops cleanly on SIGTERM (the fixture checks its exit code)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.stack.kafka import KafkaBroker
from tests.integration.conftest import Isolated
from tests.polling import wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> tuple[str, Samples]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scraped(port: int, check: Callable[[Samples], bool]) -> Callable[[], Samples]:
    """A probe: the samples once ``check`` holds, else none (falsy)."""

    def probe() -> Samples:
        try:
            _, samples = scrape(port)
        except OSError:
            return {}  # not serving yet
        return samples if check(samples) else {}

    return probe


def test_every_stage_exports_real_figures(isolated: Isolated) -> None:
    gateway_port, score_port = isolated.metrics_ports["gateway"], isolated.metrics_ports["score"]
    isolated.start("gateway", "gateway")
    isolated.start("score", "score")
    root = isolated.mqtt_root
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        now = time.time_ns() // 1_000_000
        for seq in range(5):
            for device in ("mx-a", "mx-b"):
                t = now + seq * 1000
                body = reading_payload(seq, t, t, {"temperature": 21.0})
                client.publish(f"{root}/{device}/telemetry", body, qos=1).wait_for_publish(10)
        spike = reading_payload(5, now + 5000, now + 5000, {"temperature": 60.0})
        for _ in range(2):  # the second is a repeat
            client.publish(f"{root}/mx-a/telemetry", spike, qos=1).wait_for_publish(10)
        client.publish(f"{root}/mx-b/telemetry", b"{not json", qos=1).wait_for_publish(10)

        score = wait_until(
            scraped(
                score_port,
                lambda s: value(s, "fleetwatch_score_readings_scored_total") >= 11,
            ),
            240,
            "the scorer's counts of the readings",
        )
        # buffered for 10 minutes: behind the watermark now that newer readings were scored
        late = reading_payload(9, now - 600_000, now, {"temperature": 21.0})
        client.publish(f"{root}/mx-b/telemetry", late, qos=1).wait_for_publish(10)
        score = wait_until(
            scraped(score_port, lambda s: value(s, "fleetwatch_score_late_readings_total") >= 1),
            120,
            "the late reading counted",
        )

    assert value(score, "fleetwatch_score_duplicate_readings_total") >= 1
    opened = {
        dict(labels)["kind"]
        for (name, labels), n in score.items()
        if name == "fleetwatch_score_alert_events_total" and dict(labels)["event"] == "open" and n
    }
    assert "fixed-baseline" in opened
    query = {"query": "score"}
    assert value(score, "fleetwatch_streaming_batches_total", **query) >= 1
    assert value(score, "fleetwatch_streaming_input_rows_total", **query) >= 13
    assert (
        value(score, "fleetwatch_streaming_watermark_timestamp_seconds", **query) > now / 1000 - 300
    )
    assert (
        value(
            score,
            "fleetwatch_streaming_batch_part_duration_seconds_count",
            part="addBatch",
            **query,
        )
        >= 1
    )
    state = value(
        score, "fleetwatch_streaming_state_rows", operator="transformWithStateInPandasExec", **query
    )
    assert state >= 1
    raw = isolated.topics.telemetry_raw
    assert (
        "fleetwatch_streaming_source_offsets_behind_latest",
        frozenset({**query, "source": raw}.items()),
    ) in score, "the Kafka source's offsets are read"

    gateway = wait_until(
        scraped(gateway_port, lambda s: value(s, "fleetwatch_mosquitto_clients_connected") > 0),
        60,
        "the broker's $SYS figures",
    )
    assert value(gateway, "fleetwatch_gateway_readings_accepted_total") >= 14
    assert value(gateway, "fleetwatch_gateway_dead_lettered_total", reason="json") == 1
    assert value(gateway, "fleetwatch_gateway_produce_latency_seconds_count") >= 15
    assert value(gateway, "fleetwatch_gateway_in_flight_messages") == 0
    assert value(gateway, "fleetwatch_gateway_mqtt_connected") == 1
    assert value(gateway, "fleetwatch_gateway_clock_offset_seconds_count") >= 14
    assert value(gateway, "fleetwatch_mosquitto_clients_connected") >= 2
    assert value(gateway, "fleetwatch_mosquitto_messages_received_total") > 0
    for port in (gateway_port, score_port):
        assert "mx-" not in scrape(port)[0], "never a device id in a label"

    broker = KafkaBroker(isolated.settings)
    if broker.metrics_agent is not None and isolated.settings.kafka.metrics_port:
        kafka_text, kafka = scrape(isolated.settings.kafka.metrics_port)
        assert value(kafka, "kafka_server_replicamanager_partitioncount") > 0
        assert value(kafka, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert "kafka_server_brokertopicmetrics_messagesin_total" in kafka_text
        assert "jvm_memory_used_bytes" in kafka_text
