"""`fleetwatch stack`: topics and configs, `up` twice, a full up/down cycle that leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.manager import Stack
from tests.integration.conftest import fleetwatch, free_port


def test_the_topics_of_the_design_exist_with_their_cleanup_policy(stack_settings: Settings) -> None:
    admin = AdminClient(client_config(stack_settings.kafka))
    topics = stack_settings.topics
    existing = admin.list_topics(timeout=10).topics
    for name in topics.model_dump().values():
        assert name in existing
        assert len(existing[name].partitions) == stack_settings.kafka.partitions
    resources = [
        ConfigResource("topic", topics.model_params),
        ConfigResource("topic", topics.telemetry_raw),
    ]
    configs = {r.name: f.result() for r, f in admin.describe_configs(resources).items()}
    assert configs[topics.model_params]["cleanup.policy"].value == "compact"
    assert configs[topics.telemetry_raw]["cleanup.policy"].value == "delete"


def test_up_twice_is_harmless(stack_settings: Settings) -> None:
    before = [c.pid for c in Stack(stack_settings).status()]
    result = fleetwatch("stack", "up")
    assert result.returncode == 0, result.stderr
    assert [c.pid for c in Stack(stack_settings).status()] == before
    assert fleetwatch("stack", "status").returncode == 0


def test_a_second_stack_comes_up_and_down_leaving_nothing(
    stack_settings: Settings, tmp_path: Path
) -> None:
    kafka_port, controller_port, mqtt_port = free_port(), free_port(), free_port()
    env = dict(os.environ)
    env.update(
        {
            "FLEETWATCH_RUN_DIR": str(tmp_path),
            "FLEETWATCH_KAFKA__PORT": str(kafka_port),
            "FLEETWATCH_KAFKA__CONTROLLER_PORT": str(controller_port),
            "FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka_port}",
            "FLEETWATCH_KAFKA__METRICS_PORT": str(free_port()),  # the session stack's is taken
            "FLEETWATCH_MQTT__PORT": str(mqtt_port),
            "FLEETWATCH_MQTT__SERVICE_PORT": str(free_port()),
        }
    )
    up = fleetwatch("stack", "up", env=env)
    assert up.returncode == 0, up.stderr
    settings = Settings(_env_file=None, run_dir=tmp_path)  # pid files live under the run dir
    pids = [c.pid for c in Stack(settings).status()]
    assert all(pids)
    down = fleetwatch("stack", "down", env=env)
    assert down.returncode == 0, down.stderr
    for pid in pids:
        assert pid is not None
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        )
    assert fleetwatch("stack", "status", env=env).returncode == 3


def test_a_busy_port_is_a_one_line_error_not_a_traceback(
    stack_settings: Settings, tmp_path: Path
) -> None:
    env = dict(os.environ)
    env.update(
        {
            "FLEETWATCH_RUN_DIR": str(tmp_path),
            "FLEETWATCH_MQTT__PORT": str(stack_settings.mqtt.port),  # the session stack holds it
            "FLEETWATCH_KAFKA__PORT": str(free_port()),
            "FLEETWATCH_KAFKA__CONTROLLER_PORT": str(free_port()),
        }
    )
    result = fleetwatch("stack", "up", env=env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"port {stack_settings.mqtt.port} is already in use" in result.stderr
    assert str(tmp_path / "logs" / "mosquitto.log") in result.stderr
