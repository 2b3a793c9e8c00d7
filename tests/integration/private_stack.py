"""A stack of a test's own: Kafka and Mosquitto on free ports with their own run directory, for
tests that stop or kill a broker, which the shared stack must never see."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from fleetwatch.contracts.settings import KafkaSettings, MqttSettings, Settings
from fleetwatch.stack.manager import Stack
from tests.integration.conftest import free_port

Private = tuple[Settings, dict[str, str]]
"""The stack's settings, and the environment that points a ``fleetwatch`` process at it."""


@contextmanager
def private_stack(run_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[Private]:
    """Bring the stack up under ``run_dir`` while the block runs, and down after; ``env`` is
    added to the processes' environment (a stage's own settings)."""
    kafka_port, mqtt_port, services_port = free_port(), free_port(), free_port()
    settings = Settings(
        run_dir=run_dir,
        kafka=KafkaSettings(
            port=kafka_port,
            controller_port=free_port(),
            bootstrap_servers=f"127.0.0.1:{kafka_port}",
            metrics_port=0,
        ),
        mqtt=MqttSettings(port=mqtt_port, service_port=services_port),
    )
    process_env = {
        **os.environ,
        "FLEETWATCH_RUN_DIR": str(settings.run_path),
        "FLEETWATCH_KAFKA__PORT": str(kafka_port),
        "FLEETWATCH_KAFKA__CONTROLLER_PORT": str(settings.kafka.controller_port),
        "FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
        "FLEETWATCH_MQTT__PORT": str(mqtt_port),
        "FLEETWATCH_MQTT__SERVICE_PORT": str(services_port),
        **(env or {}),
    }
    stack = Stack(settings)
    stack.up()
    try:
        yield settings, process_env
    finally:
        stack.down()
