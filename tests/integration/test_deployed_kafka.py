"""The Kafka broker of deploy/compose.yaml, as the apache/kafka image would configure it from
the compose file's environment (tests/unit/deploy_support.py: its start.sh, then the image's
renaming of KAFKA_* variables), run from the project's broker jars on free loopback ports:
the topics job (logged in as the broker) creates the topics and the stages' ACLs; the gateway
with the compose settings produces and consumes; the API's account may send a command but not
write telemetry; a client without a login, or with a wrong password, is refused on every
listener; the health check's login is accepted.

What it cannot show: the image itself (no Docker here) — that its scripts behave as the unit
tests read them."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from fleetwatch.contracts.settings import KafkaSettings, KafkaStage, Settings
from fleetwatch.contracts.topics import TopicSpec, topic_specs
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.stack.acls import apply_acls, bindings
from fleetwatch.stack.errors import StackError
from fleetwatch.stack.kafka import LOG4J2
from fleetwatch.stack.processes import ManagedProcess
from fleetwatch.stack.topics import ensure_topics
from tests.integration.conftest import free_port
from tests.unit.deploy_support import compose_env, deployed_kafka
from tests.unit.test_deploy_brokers import COMPOSE_KAFKA_LOGIN

PROBE = Path(__file__).with_name("KafkaLoginProbe.java")


@dataclass(frozen=True)
class DeployedBroker:
    client: KafkaSettings
    """A fleetwatch client of the compose file (the gateway's Kafka settings), pointed here."""
    services: dict[str, Settings]
    """The settings of the compose services ``topics``, ``gateway`` and ``api``, pointed here
    (each stage's Kafka settings as it logs in)."""
    ports: dict[str, int]
    """Each client-facing listener's port (CLIENT, HOST)."""
    probe_file: Path
    classpath: str


def _java(classpath: str, log4j: Path, main: str, *args: str) -> list[str]:
    return [
        "java",
        "-Xmx512m",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath,
        main,
        *args,
    ]


@pytest.fixture
def deployed_broker(tmp_path: Path) -> Iterator[DeployedBroker]:
    env = compose_env("kafka", COMPOSE_KAFKA_LOGIN)
    broker = deployed_kafka(env, tmp_path / "sasl")
    props = dict(broker.server)
    # only where it runs changes: the ports, the host names, the data directory
    ports = {"CLIENT": free_port(), "HOST": free_port(), "CONTROLLER": free_port()}
    props["listeners"] = ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    props["advertised.listeners"] = ",".join(
        f"{n}://127.0.0.1:{p}" for n, p in ports.items() if n != "CONTROLLER"
    )
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    props["controller.quorum.voters"] = f"1@127.0.0.1:{ports['CONTROLLER']}"
    props["log.dirs"] = str(tmp_path / "data")
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(LOG4J2)
    classpath = f"{Settings(_env_file=None).jvm_cache / 'kafka'}/*"
    formatted = subprocess.run(
        _java(
            classpath,
            log4j,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={env['CLUSTER_ID']}",
            f"--config={config}",
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr

    address = f"127.0.0.1:{ports['CLIENT']}"
    stages: dict[str, KafkaStage | None] = {"topics": None, "gateway": "gateway", "api": "api"}
    services = {
        service: service_settings(compose_env(service, COMPOSE_KAFKA_LOGIN), address, stage)
        for service, stage in stages.items()
    }
    client = services["gateway"].kafka
    proc = ManagedProcess("deployed-kafka", tmp_path / "run")
    proc.start(_java(classpath, log4j, "kafka.Kafka", str(config)))
    try:
        proc.wait_ready(lambda: answers(services["topics"].kafka), 60.0, 0.25)
        yield DeployedBroker(client, services, ports, broker.probe_file, classpath)
    finally:
        proc.stop()


def service_settings(env: dict[str, str], address: str, stage: KafkaStage | None) -> Settings:
    """A compose service's Settings from its environment's FLEETWATCH_KAFKA__ variables (the
    rest left at their defaults, topics included), Kafka at ``address``, as ``stage`` logs in."""
    nested: dict[str, Any] = {}
    for name, value in env.items():
        if name.startswith("FLEETWATCH_KAFKA__"):
            *path, leaf = name.removeprefix("FLEETWATCH_KAFKA__").lower().split("__")
            node = nested
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = value
    kafka = KafkaSettings.model_validate(nested | {"bootstrap_servers": address})
    settings = Settings(_env_file=None, kafka=kafka)
    if stage is None:
        return settings
    return settings.model_copy(update={"kafka": kafka.for_stage(stage)})


def answers(kafka: KafkaSettings) -> bool:
    admin = AdminClient(client_config(kafka, {"log_level": 0}))
    try:
        admin.list_topics(timeout=3)
    except KafkaException:
        return False
    return True


def test_the_compose_kafka_lets_each_stage_do_its_stage_s_work_and_nobody_else_in(
    deployed_broker: DeployedBroker,
) -> None:
    topics_job = deployed_broker.services["topics"]
    assert topics_job.kafka.sasl_username == "broker"
    specs = topic_specs(topics_job.topics)
    assert len(ensure_topics(topics_job.kafka, specs, 1)) == len(specs)
    apply_acls(topics_job.kafka, bindings(topics_job, shared=False))  # as `topics create --acls`

    kafka = deployed_broker.client
    assert kafka.sasl_username == "fleetwatch-gateway"
    raw = topics_job.topics.telemetry_raw
    producer = Producer(client_config(kafka, {"acks": "all"}))
    for i in range(3):
        producer.produce(raw, key=f"d{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(15) == 0
    api = deployed_broker.services["api"]
    assert api.kafka.sasl_username == "fleetwatch-api"
    read = sorted(read_to_end(api.kafka, raw, api.api.consumer_group))
    assert read == [(f"d{i}".encode(), f"v{i}".encode()) for i in range(3)]
    # the API's account may send a command, and may not write telemetry
    assert write_one(api.kafka, api.topics.device_commands) is None
    refusal = write_one(api.kafka, raw)
    assert refusal is not None
    assert refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # …nor may the gateway create a topic
    topic = f"deployed-sasl-{uuid.uuid4().hex[:8]}"
    with pytest.raises(StackError):
        ensure_topics(kafka, [TopicSpec(topic, "device_id")], 1)

    for name in ("CLIENT", "HOST"):
        port = deployed_broker.ports[name]
        address = f"127.0.0.1:{port}"
        wrong = kafka.model_dump() | {"bootstrap_servers": address, "sasl_password": "nope"}
        assert not answers(KafkaSettings.model_validate(wrong)), port
        assert not answers(KafkaSettings(bootstrap_servers=address)), port  # no login

    # the health check's login (probe.properties, as start.sh wrote it) is the broker's own
    probe = health_check(deployed_broker, deployed_broker.probe_file)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    # …and it can fail: the same file with another password
    other = deployed_broker.probe_file.with_name("other.properties")
    text = deployed_broker.probe_file.read_text()
    other.write_text(text.replace('username="broker" password="', 'username="broker" password="x'))
    assert health_check(deployed_broker, other).returncode == 1


def write_one(kafka: KafkaSettings, topic: str) -> KafkaError | None:
    """None when the broker took the record, else why not."""
    producer = Producer(client_config(kafka, {"message.timeout.ms": 10000}))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value=b"v", on_delivery=lambda e, _m: outcome.append(e))
    producer.flush(15)
    assert outcome
    return outcome[0]


def health_check(broker: DeployedBroker, login: Path) -> subprocess.CompletedProcess[str]:
    argv = ["java", "-cp", broker.classpath, str(PROBE), f"127.0.0.1:{broker.ports['CLIENT']}"]
    return subprocess.run(
        [*argv, str(login)], capture_output=True, text=True, timeout=60, check=False
    )
