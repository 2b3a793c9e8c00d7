"""Kafka with a SASL login and an account per stage, on a broker of the stack's own
configuration (``fleetwatch stack up`` with ``SASL_PLAINTEXT``, PLAIN and SCRAM-SHA-512): the
broker authorizes every request, and each stage's account may do exactly what its stage does
(:mod:`fleetwatch.stack.acls`) — the API's writing ``telemetry.raw`` is refused, its command
accepted. The stages' clients (confluent-kafka) and Spark's Kafka sink and source (the Java
client, ``kafka.sasl.jaas.config``) get in with their accounts; a wrong password, and a client
without SASL, do not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.settings import (
    KafkaSettings,
    KafkaStage,
    MqttSettings,
    Settings,
    TopicSettings,
)
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.kafka_config import client_config, spark_options
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.mqtt_config import configure
from fleetwatch.stack.acls import STAGES, Grant, stage_grants
from fleetwatch.stack.credentials import login
from fleetwatch.stack.manager import Stack
from fleetwatch.streaming.kafka_io import kafka_table
from fleetwatch.streaming.spark_session import build_session
from tests.integration.conftest import free_port
from tests.polling import wait_until

PASSWORD = 's3cret "quoted" \\ too'
"""A password with quotes and a backslash (JAAS quoting, and a properties file's escaping)."""

PARTITIONS = 1

SCRAM = "SCRAM-SHA-512"
ONCE_WITH_SCRAM = pytest.mark.parametrize("sasl_stack", [SCRAM], indirect=True)
"""For a test of code that is the same for every mechanism (Spark's login, the stages'): on
the SCRAM broker only (the module's, not one of its own)."""


@pytest.fixture(scope="module", params=["PLAIN", SCRAM])
def sasl_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The stack's broker with SASL, the shared account and one per stage, topics of this
    test's own names."""
    port = free_port()
    kafka = KafkaSettings.model_validate(
        {
            "port": port,
            "controller_port": free_port(),
            "bootstrap_servers": f"127.0.0.1:{port}",
            "metrics_port": 0,
            "partitions": PARTITIONS,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": request.param,
            "sasl_username": "fleetwatch",
            "sasl_password": PASSWORD,
            "logins": {
                stage: {"username": f"fw-{stage}", "password": f"{PASSWORD} {stage}"}
                for stage in STAGES
            },
        }
    )
    prefix = f"sasl-{uuid.uuid4().hex[:6]}"
    topics = TopicSettings.model_validate(
        {name: f"{prefix}.{field.default}" for name, field in TopicSettings.model_fields.items()}
    )
    settings = Settings(
        _env_file=None,
        run_dir=tmp_path_factory.mktemp("sasl") / "run",
        kafka=kafka,
        mqtt=MqttSettings(port=free_port(), service_port=free_port()),
        topics=topics,
    )
    stack = Stack(settings)
    stack.up()  # ready once the broker's own account logged in; then accounts and ACLs
    try:
        for spec in topic_specs(settings.topics):  # the shared account writes every topic
            assert produce_one(settings.kafka, spec.name) is None, spec.name
        yield settings
    finally:
        stack.down()


def produce_one(kafka: KafkaSettings, topic: str) -> KafkaError | None:
    """Write one record as ``kafka``'s account: None when the broker took it, else why not."""
    producer = Producer(
        client_config(kafka, {"enable.idempotence": True, "message.timeout.ms": 10000})
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, key=b"d1", value=b"v", on_delivery=lambda e, _m: outcome.append(e))
    producer.flush(15)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def consume_and_commit(kafka: KafkaSettings, topic: str, group: str) -> None:
    """Read ``topic`` in ``group`` until a record comes, and commit it: the group's rights."""
    consumer = Consumer(
        client_config(kafka, {"group.id": group, "auto.offset.reset": "earliest", "log_level": 0})
    )
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            consumer.commit(message=msg, asynchronous=False)
            return
        raise AssertionError(f"nothing read from {topic} in {group}")
    finally:
        consumer.close()


def own_group(granted: set[Grant]) -> str:
    """A consumer group among ``granted`` (even a consumer that commits nothing finds its
    group's coordinator, which takes a right on the group)."""
    group = min(g for g in granted if g.resource == "group")
    return f"{group.name}-sasl-test" if group.prefixed else group.name


def readable(kafka: KafkaSettings, topic: str, group: str) -> bool:
    """Whether ``kafka``'s account gets the record :func:`sasl_stack` left in ``topic``."""
    consumer = Consumer(client_config(kafka, {"group.id": group, "log_level": 0}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:  # not even DESCRIBE
            assert meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, meta.error
            return False
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                return True
            assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
            return False
        raise AssertionError(f"neither a record nor a refusal from {topic}")
    finally:
        consumer.close()


def refused(kafka: KafkaSettings) -> bool:
    admin = AdminClient(client_config(kafka, {"log_level": 0}))
    try:
        admin.list_topics(timeout=5)
    except KafkaException:
        return True
    return False


def test_the_api_may_not_write_telemetry_but_may_send_a_command(sasl_stack: Settings) -> None:
    api = sasl_stack.kafka.for_stage("api")
    assert api.sasl_username == "fw-api"
    denied = produce_one(api, sasl_stack.topics.telemetry_raw)
    assert denied is not None
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_one(api, sasl_stack.topics.device_commands) is None
    # the gateway's account writes telemetry, and reads the command in its group
    gateway = sasl_stack.kafka.for_stage("gateway")
    assert produce_one(gateway, sasl_stack.topics.telemetry_raw) is None
    consume_and_commit(
        gateway, sasl_stack.topics.device_commands, f"{sasl_stack.gateway.share_group}-commands"
    )
    with pytest.raises(KafkaException):  # …but not in a group of another's
        consume_and_commit(gateway, sasl_stack.topics.device_commands, "fleetwatch-api")


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_s_account_writes_and_reads_exactly_its_stage_s_topics(
    sasl_stack: Settings, stage: KafkaStage
) -> None:
    own = sasl_stack.kafka.for_stage(stage)
    granted = stage_grants(sasl_stack, stage)
    for spec in topic_specs(sasl_stack.topics):
        may_write = any(g.name == spec.name and g.operation == "WRITE" for g in granted)
        may_read = any(g.name == spec.name and g.operation == "READ" for g in granted)
        wrote = produce_one(own, spec.name)
        assert (wrote is None) == may_write, (stage, spec.name, wrote)
        assert readable(own, spec.name, own_group(granted)) == may_read, (stage, spec.name)


@ONCE_WITH_SCRAM
def test_spark_logs_in_as_the_scorer_and_reads_and_writes_its_topics(
    sasl_stack: Settings,
) -> None:
    assert sasl_stack.kafka.sasl_mechanism == SCRAM
    scorer = sasl_stack.model_copy(update={"kafka": sasl_stack.kafka.for_stage("scorer")})
    raw, alerts = sasl_stack.topics.telemetry_raw, sasl_stack.topics.alerts
    rows = [(f"d{i}", f"v{i}") for i in range(3)]
    gateway = sasl_stack.kafka.for_stage("gateway")
    producer = Producer(client_config(gateway, {"acks": "all"}))
    for key, value in rows:
        producer.produce(raw, key=key.encode(), value=value.encode())
    assert producer.flush(15) == 0
    spark: Any = build_session(scorer, "fleetwatch-sasl-test")
    try:
        back = kafka_table(spark, scorer, raw).selectExpr("CAST(value AS STRING) AS v")
        assert {r.v for r in back.collect()} >= {"v0", "v1", "v2"}  # and the other tests'
        frame = spark.createDataFrame(rows, "key string, value string")
        options = spark_options(scorer.kafka)
        frame.write.format("kafka").options(**options).option("topic", alerts).save()
        with pytest.raises(Exception, match=r"(?i)authoriz"):  # not a topic the scorer writes
            frame.write.format("kafka").options(**options).option("topic", raw).save()
    finally:
        spark.stop()
    api = sasl_stack.kafka.for_stage("api")
    read = read_to_end(api, alerts, "fleetwatch-api-sasl-test")
    assert set(read) >= {(k.encode(), v.encode()) for k, v in rows}


def test_a_wrong_password_and_a_client_without_sasl_are_refused(sasl_stack: Settings) -> None:
    kafka = sasl_stack.kafka
    assert not refused(kafka)
    for stage in STAGES:
        assert not refused(kafka.for_stage(stage)), stage
    assert refused(KafkaSettings.model_validate(kafka.model_dump() | {"sasl_password": "nope"}))
    assert refused(KafkaSettings(bootstrap_servers=kafka.bootstrap_servers))  # no SASL


def stage_env(settings: Settings) -> dict[str, str]:
    """The environment that points a stage process at ``settings``' stack, every account in it
    (each stage takes its own)."""
    k, t = settings.kafka, settings.topics
    env = {name: value for name, value in os.environ.items() if not name.startswith("FLEETWATCH_")}
    env |= {
        "FLEETWATCH_RUN_DIR": str(settings.run_path),
        "FLEETWATCH_KAFKA__PORT": str(k.port),
        "FLEETWATCH_KAFKA__CONTROLLER_PORT": str(k.controller_port),
        "FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS": k.bootstrap_servers,
        "FLEETWATCH_KAFKA__SECURITY_PROTOCOL": k.security_protocol,
        "FLEETWATCH_KAFKA__SASL_MECHANISM": k.sasl_mechanism,
        "FLEETWATCH_KAFKA__SASL_USERNAME": k.sasl_username or "",
        "FLEETWATCH_KAFKA__SASL_PASSWORD": k.sasl_password.get_secret_value()
        if k.sasl_password
        else "",
        "FLEETWATCH_MQTT__PORT": str(settings.mqtt.port),
        "FLEETWATCH_MQTT__SERVICE_PORT": str(settings.mqtt.services_port),
        "FLEETWATCH_GATEWAY__METRICS_PORT": "0",
    }
    for stage, account in k.logins.items():
        env[f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__USERNAME"] = account.username
        if account.password is not None:
            env[f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__PASSWORD"] = (
                account.password.get_secret_value()
            )
    env |= {f"FLEETWATCH_TOPICS__{name.upper()}": value for name, value in t.model_dump().items()}
    return env


@ONCE_WITH_SCRAM
def test_the_gateway_and_the_api_run_as_their_own_accounts(
    sasl_stack: Settings, tmp_path: Path
) -> None:
    """The real stages, each logged in as its stage: a reading the gateway takes reaches
    ``telemetry.raw``; the API is ready and its materialiser commits in its group."""
    assert sasl_stack.kafka.sasl_mechanism == SCRAM
    env = stage_env(sasl_stack)
    api_port = free_port()
    env["FLEETWATCH_API__PORT"] = str(api_port)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name, argv in (("gateway", ["gateway"]), ("api", ["api"])):
        with (tmp_path / f"{name}.log").open("wb") as log:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "fleetwatch.cli.main", *argv],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    api_kafka = sasl_stack.kafka.for_stage("api")
    raw = sasl_stack.topics.telemetry_raw
    device = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=f"t-{uuid.uuid4().hex[:8]}", protocol=mqtt.MQTTv5
    )
    configure(device, login(sasl_stack, "sim"))
    device.connect(sasl_stack.mqtt.host, sasl_stack.mqtt.services_port)
    device.loop_start()
    try:

        def arrived() -> bool:
            now = time.time_ns() // 1_000_000
            topic = f"{sasl_stack.mqtt.root}/dev-sasl/telemetry"
            device.publish(topic, reading_payload(0, now, now, {"t": 1.0}), qos=1)
            keys = {key for key, _ in read_to_end(api_kafka, raw, "fleetwatch-api-sasl-read")}
            return b"dev-sasl" in keys

        wait_until(arrived, 60, "a reading through the gateway into telemetry.raw", 1.0)

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/readyz", timeout=2):
                    return True
            except OSError:
                return False

        wait_until(ready, 60, "the API ready (its database and Kafka)", 0.5)
        admin = AdminClient(client_config(Stack(sasl_stack).kafka.admin_settings()))
        group = ConsumerGroupTopicPartitions(sasl_stack.api.consumer_group)

        def committed() -> bool:
            result = admin.list_consumer_group_offsets([group])[group.group_id].result()
            return any(tp.offset > 0 for tp in result.topic_partitions or [])

        wait_until(committed, 60, "the API's materialiser to commit in its group", 0.5)
    finally:
        device.disconnect()
        device.loop_stop()
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in procs}
    assert codes == {"gateway": 0, "api": 0}, logs
    # a stage whose code reads or writes a topic its ACLs leave out logs the refusal
    # (fleetwatch/stack/acls.py must follow the code)
    for name, text in logs.items():
        assert "authorization failed" not in text.lower(), (name, text)
