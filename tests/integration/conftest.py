"""Integration tests run against the real stack that `fleetwatch stack up` starts.

The stack comes up once per session (and goes down at the end if this session started it);
every test gets its own topics, MQTT topic root, consumer groups, checkpoints and database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from fleetwatch.contracts.settings import Settings, TopicSettings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.mqtt_config import configure
from fleetwatch.stack.credentials import Credentials, Role, login
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics, ensure_topics
from tests.jvm import class_archive, quick_jit_options
from tests.polling import wait_until

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under this folder ``integration`` (``-m "not integration"`` leaves them
    out). A conftest's ``pytestmark`` marks nothing, and this hook sees the whole session's
    items, hence the folder check; ``tryfirst`` so the mark is there before ``-m`` selects."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


def fleetwatch(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetwatch.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def stack_settings() -> Iterator[Settings]:
    settings = Settings()
    already_up = all(c.pid for c in Stack(settings).status())
    # the Spark JVMs' class archive, made while the brokers start (on a machine that has none
    # yet, a Spark run of half a minute that the first test would otherwise wait for)
    archive = threading.Thread(target=class_archive, args=(settings,), name="class-archive")
    archive.start()
    result = fleetwatch("stack", "up")
    archive.join()
    assert result.returncode == 0, f"stack up failed: {result.stderr}"
    yield settings
    if not already_up:
        down = fleetwatch("stack", "down")
        assert down.returncode == 0, down.stderr


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free loopback port never handed out before in this session (the kernel may offer the
    same ephemeral port twice in a row once the first socket is closed)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def login_as(client: mqtt.Client, settings: Settings, role: Role) -> None:
    """Log ``client`` in with the stack's account for ``role`` (none on an anonymous broker)."""
    configure(client, login(settings, role))


def connect(
    isolated: Isolated,
    user: str | None,
    password: str,
    client_id: str | None = None,
    port: int | None = None,
) -> tuple[bool, mqtt.Client]:
    """Whether the broker accepts the login (on the devices' listener unless ``port`` names
    another), and the (connected or not) client."""
    answer: list[bool] = []
    done = threading.Event()
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id or f"cred-{uuid.uuid4().hex[:6]}",
        protocol=mqtt.MQTTv5,
    )
    mqtt_settings = isolated.settings.mqtt
    configure(client, mqtt_settings if user is None else mqtt_settings.as_account(user, password))

    def on_connect(_c: Any, _u: Any, _f: Any, reason: ReasonCode, _p: Any) -> None:
        answer.append(not reason.is_failure)
        done.set()

    client.on_connect = on_connect
    client.connect(mqtt_settings.host, port or mqtt_settings.port)
    client.loop_start()
    done.wait(10)
    if not answer or not answer[0]:
        client.loop_stop()
        return False, client
    return True, client


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]

    @classmethod
    def of(cls, msg: Message) -> Record:
        raw = msg.headers() or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = {k: v for k, v in pairs if isinstance(v, bytes)}
        return cls(msg.key() if isinstance(msg.key(), bytes) else None, msg.value() or b"", headers)


@dataclass
class Isolated:
    """One test's own corner of the shared stack, and the env that points stages at it."""

    settings: Settings
    topics: TopicSettings
    env: dict[str, str]
    tag: str
    mqtt_root: str
    api_port: int
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """Where the gateway, scorer and trainer serve their metrics (free ports of this test)."""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def stack_env(self) -> dict[str, str]:
        """The env of a command about the stack itself (its run dir: ``fleetwatch devices``)."""
        env = dict(self.env)
        env["FLEETWATCH_RUN_DIR"] = str(self.settings.run_path.resolve())
        return env

    def start(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = Path(self.env["FLEETWATCH_RUN_DIR"]) / f"{name}.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "fleetwatch.cli.main", *args],
                env=env or self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def stop(self, *names: str) -> None:
        """SIGTERM the named processes (every one when none is named) still running, at once,
        and wait for each to exit 0 (as the fixture would at the end): for the part of a test
        that needs none of them, which their polling and micro-batches would only slow down."""
        running = {
            name: p
            for name, p in self.procs.items()
            if p.poll() is None and (not names or name in names)
        }
        for proc in running.values():
            proc.send_signal(signal.SIGTERM)
        logs = self.env["FLEETWATCH_RUN_DIR"]
        for name, proc in running.items():
            code = proc.wait(timeout=60)
            assert code == 0, f"{name} exited {code} on SIGTERM; logs in {logs}"

    @contextlib.contextmanager
    def mqtt_client(self, role: Role = "sim") -> Iterator[mqtt.Client]:
        """A client logged in with the stack's account for ``role`` (the simulator's writes
        telemetry and acks and reads commands; the gateway's reads telemetry)."""
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"t-{uuid.uuid4().hex[:8]}", protocol=mqtt.MQTTv5
        )
        login_as(client, self.settings, role)
        client.connect(self.settings.mqtt.host, self.settings.mqtt.services_port)
        client.loop_start()
        try:
            yield client
        finally:
            client.disconnect()
            client.loop_stop()

    def await_gateway(self, client: mqtt.Client) -> None:
        """The gateway's shared subscription exists once a probe reading reaches Kafka."""
        topic = f"{self.mqtt_root}/probe/telemetry"

        def probe_arrived() -> bool:
            now = time.time_ns() // 1_000_000
            client.publish(topic, reading_payload(0, now, now, {"t": 1.0}), qos=1).wait_for_publish(
                10
            )
            return sum(self.end_offsets(self.topics.telemetry_raw).values()) >= 1

        wait_until(probe_arrived, 30, "the gateway to subscribe", interval_s=0.5)

    def consumer(self) -> Consumer:
        return Consumer(
            client_config(
                self.settings.kafka,
                {
                    "group.id": f"test-{self.tag}-{uuid.uuid4().hex[:6]}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                },
            )
        )

    def end_offsets(self, topic: str) -> dict[int, int]:
        return end_offsets(self.settings.kafka, topic)

    def read_to_end(self, topic: str, timeout_s: float = 30) -> list[Record]:
        """Every record of ``topic`` up to the end offsets it has now, in offset order per
        partition, or what was read by the deadline. The partitions are assigned, not joined
        as a group, and the read ends at those offsets: no wait for records that could follow."""
        consumer = self.consumer()
        out: list[Record] = []
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            left: dict[int, int] = {}
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    left[p] = high
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in left])
            deadline = time.monotonic() + timeout_s
            while left and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.1):
                    partition, offset = msg.partition(), msg.offset()
                    if msg.error() is not None or partition not in left or offset is None:
                        continue
                    if offset < left[partition]:
                        out.append(Record.of(msg))
                    if offset + 1 >= left[partition]:
                        del left[partition]
        finally:
            consumer.close()
        return out

    def read_all(self, topic: str, expected: int, timeout_s: float = 30) -> list[Record]:
        """Every record of ``topic`` once ``expected`` have been read, or at the deadline."""
        consumer = self.consumer()
        consumer.subscribe([topic])
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and len(out) < expected:
                # a consume waits out its timeout unless 500 records come: a short one stops
                # as soon as `expected` are in (a topic read whole waited 0.5 s for nothing)
                for msg in consumer.consume(500, timeout=0.1):
                    if msg.error() is None:
                        out.append(Record.of(msg))
            # records past `expected` would be a defect the caller should see: read what is left
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error() is None:
                    out.append(Record.of(msg))
        finally:
            consumer.close()
        return out


@pytest.fixture
def isolated(stack_settings: Settings, tmp_path: Path) -> Iterator[Isolated]:
    tag = uuid.uuid4().hex[:8]
    base = TopicSettings()
    topics = TopicSettings(**{name: f"{value}.t{tag}" for name, value in base.model_dump().items()})
    kafka = stack_settings.kafka
    ensure_topics(kafka, topic_specs(topics), kafka.partitions)
    api_port = free_port()
    metrics_ports = {stage: free_port() for stage in ("gateway", "score", "train")}
    mqtt_root = f"t{tag}/devices"
    env = dict(os.environ)
    env.update(
        {f"FLEETWATCH_TOPICS__{name.upper()}": value for name, value in topics.model_dump().items()}
    )
    env.update(
        {
            "FLEETWATCH_RUN_DIR": str(tmp_path),
            "FLEETWATCH_MQTT__ROOT": mqtt_root,
            "FLEETWATCH_API__PORT": str(api_port),
            "FLEETWATCH_API__CONSUMER_GROUP": f"api-{tag}",
            "FLEETWATCH_GATEWAY__CLIENT_ID": f"gateway-{tag}",
            "FLEETWATCH_GATEWAY__SHARE_GROUP": f"share-{tag}",
            # the stages log in with the stack's service accounts (the test's run dir is its own)
            "FLEETWATCH_MQTT__CREDENTIALS_DIR": str(Credentials(stack_settings).dir.resolve()),
            # Spark's JVMs live a minute or two here: C1 alone, no C2 compiler threads taking
            # the two cores from the stages while they start (the configured options, plus this)
            "FLEETWATCH_SPARK__JAVA_OPTIONS": quick_jit_options(stack_settings),
        }
    )
    env.update({f"FLEETWATCH_{s.upper()}__METRICS_PORT": str(p) for s, p in metrics_ports.items()})
    iso = Isolated(stack_settings, topics, env, tag, mqtt_root, api_port, metrics_ports)
    yield iso
    for proc in iso.procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    try:
        for name, proc in iso.procs.items():
            code = proc.wait(timeout=60)
            assert code == 0, f"{name} exited {code} on SIGTERM; logs in {tmp_path}"
    finally:
        for proc in iso.procs.values():
            if proc.poll() is None:
                proc.kill()
        delete_topics(kafka, topics.model_dump().values())
