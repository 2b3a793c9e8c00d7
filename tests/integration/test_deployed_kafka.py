"""The Kafka broker of deploy/compose.yaml, as the apache/kafka image would configure it from
the compose file's environment (tests/unit/deploy_support.py: its start.sh, then the image's
renaming of KAFKA_* variables), run from the project's broker jars on free loopback ports:
a fleetwatch client with the compose settings produces and consumes; a client without a login,
or with a wrong password, is refused on every listener; the health check's login is accepted.

What it cannot show: the image itself (no Docker here) — that its scripts behave as the unit
tests read them."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import read_to_end
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

    gateway = compose_env("gateway", COMPOSE_KAFKA_LOGIN)
    client = KafkaSettings(
        bootstrap_servers=f"127.0.0.1:{ports['CLIENT']}",
        security_protocol=gateway["FLEETWATCH_KAFKA__SECURITY_PROTOCOL"],
        sasl_mechanism=gateway["FLEETWATCH_KAFKA__SASL_MECHANISM"],
        sasl_username=gateway["FLEETWATCH_KAFKA__SASL_USERNAME"],
        sasl_password=gateway["FLEETWATCH_KAFKA__SASL_PASSWORD"],
    )
    proc = ManagedProcess("deployed-kafka", tmp_path / "run")
    proc.start(_java(classpath, log4j, "kafka.Kafka", str(config)))
    try:
        proc.wait_ready(lambda: answers(client), 60.0, 0.25)
        yield DeployedBroker(client, ports, broker.probe_file, classpath)
    finally:
        proc.stop()


def answers(kafka: KafkaSettings) -> bool:
    admin = AdminClient(client_config(kafka, {"log_level": 0}))
    try:
        admin.list_topics(timeout=3)
    except KafkaException:
        return False
    return True


def test_the_compose_kafka_lets_in_the_fleetwatch_account_and_nobody_else(
    deployed_broker: DeployedBroker,
) -> None:
    kafka = deployed_broker.client
    topic = f"deployed-sasl-{uuid.uuid4().hex[:8]}"
    assert ensure_topics(kafka, [TopicSpec(topic, "device_id")], 1) == [topic]
    producer = Producer(client_config(kafka, {"acks": "all"}))
    for i in range(3):
        producer.produce(topic, key=f"d{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(15) == 0
    read = sorted(read_to_end(kafka, topic, f"deployed-sasl-{uuid.uuid4().hex[:8]}"))
    assert read == [(f"d{i}".encode(), f"v{i}".encode()) for i in range(3)]

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


def health_check(broker: DeployedBroker, login: Path) -> subprocess.CompletedProcess[str]:
    argv = ["java", "-cp", broker.classpath, str(PROBE), f"127.0.0.1:{broker.ports['CLIENT']}"]
    return subprocess.run(
        [*argv, str(login)], capture_output=True, text=True, timeout=60, check=False
    )
