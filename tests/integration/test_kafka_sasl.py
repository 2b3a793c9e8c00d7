"""Kafka with a SASL login, on a broker of the stack's own configuration with a
``SASL_PLAINTEXT`` listener (PLAIN): the stages' clients (confluent-kafka) and Spark's Kafka
sink and source (the Java client, ``kafka.sasl.jaas.config``) get in with the settings' account;
a wrong password, and a client without SASL, do not."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config, spark_options
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.topics import ensure_topics
from fleetwatch.streaming.kafka_io import kafka_table
from fleetwatch.streaming.spark_session import build_session
from tests.integration.conftest import free_port


@pytest.fixture
def sasl_kafka(tmp_path: Path) -> Iterator[Settings]:
    port = free_port()
    kafka = KafkaSettings.model_validate(
        {
            "port": port,
            "controller_port": free_port(),
            "bootstrap_servers": f"127.0.0.1:{port}",
            "metrics_port": 0,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "fleetwatch",
            "sasl_password": 's3cret "quoted" \\ too',
        }
    )
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", kafka=kafka)
    broker = KafkaBroker(settings)
    broker.start()  # ready once a client logged in with the account (client_config)
    try:
        broker.wait_ready()
        yield settings
    finally:
        broker.proc.stop()


def refused(kafka: KafkaSettings) -> bool:
    admin = AdminClient(client_config(kafka, {"log_level": 0}))
    try:
        admin.list_topics(timeout=5)
    except KafkaException:
        return True
    return False


def test_every_kind_of_client_logs_in_with_the_settings_account(
    sasl_kafka: Settings, tmp_path: Path
) -> None:
    kafka = sasl_kafka.kafka
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    assert ensure_topics(kafka, [TopicSpec(topic, "device_id")], 1) == [topic]
    spark: Any = build_session(sasl_kafka, "fleetwatch-sasl-test")
    try:
        rows = [(f"d{i}", f"v{i}") for i in range(3)]
        frame = spark.createDataFrame(rows, "key string, value string")
        frame.write.format("kafka").options(**spark_options(kafka)).option("topic", topic).save()
        read = read_to_end(kafka, topic, "sasl-test")
        assert sorted((k or b"", v or b"") for k, v in read) == [
            (k.encode(), v.encode()) for k, v in rows
        ]
        back = kafka_table(spark, sasl_kafka, topic).selectExpr("CAST(value AS STRING) AS v")
        assert sorted(r.v for r in back.collect()) == ["v0", "v1", "v2"]
    finally:
        spark.stop()

    assert refused(KafkaSettings.model_validate(kafka.model_dump() | {"sasl_password": "nope"}))
    assert refused(KafkaSettings(bootstrap_servers=kafka.bootstrap_servers))  # no SASL
