from pathlib import Path

import pytest
from pydantic import ValidationError

from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.contracts.topics import topic_specs


def test_nested_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS", "broker-a:9092,broker-b:9092")
    monkeypatch.setenv("FLEETWATCH_TOPICS__ALERTS", "alerts.test")
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path))
    settings = Settings()
    assert settings.kafka.bootstrap_servers == "broker-a:9092,broker-b:9092"
    assert settings.topics.alerts == "alerts.test"
    assert settings.run_path == tmp_path.resolve()
    assert settings.checkpoint_root == tmp_path.resolve() / "checkpoints"


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.log_level = "DEBUG"  # type: ignore[misc]


@pytest.mark.parametrize("root", ["", "devices/", "a/+/b", "#"])
def test_an_mqtt_root_with_wildcards_is_refused(root: str) -> None:
    with pytest.raises(ValidationError, match=r"mqtt\.root"):
        MqttSettings(root=root)


def test_tables_are_compacted_and_logs_are_not() -> None:
    specs = {s.name: s for s in topic_specs(Settings().topics)}
    assert specs["model.params"].config["cleanup.policy"] == "compact"
    assert specs["device.state"].config["cleanup.policy"] == "compact"
    assert "cleanup.policy" not in specs["telemetry.raw"].config
    assert len(specs) == 9
