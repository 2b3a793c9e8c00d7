from pathlib import Path

import pytest
from pydantic import ValidationError

from fleetwatch.contracts.settings import MlflowSettings, MqttSettings, Settings
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
    assert settings.checkpoint_root == str(tmp_path.resolve() / "checkpoints")


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
    assert specs["device.quarantine-lifts"].config["cleanup.policy"] == "compact"
    assert specs["rules"].config["cleanup.policy"] == "compact"
    assert "cleanup.policy" not in specs["alerts.fast"].config
    assert len(specs) == 12


def test_mlflow_defaults_to_a_store_in_the_run_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path))
    settings = Settings()
    assert settings.mlflow_local
    assert settings.mlflow_tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow/mlflow.db"
    assert settings.mlflow_artifacts == tmp_path.resolve() / "mlflow" / "artifacts"
    monkeypatch.setenv("FLEETWATCH_MLFLOW__TRACKING_URI", "http://mlflow:5000")
    served = Settings()
    assert not served.mlflow_local
    assert served.mlflow_tracking_uri == "http://mlflow:5000"


@pytest.mark.parametrize("prefix", ["", "a/b", "-x", "fleet watch"])
def test_a_model_prefix_that_is_no_plain_name_is_refused(prefix: str) -> None:
    with pytest.raises(ValidationError, match=r"mlflow\.model_prefix"):
        MlflowSettings(model_prefix=prefix)
