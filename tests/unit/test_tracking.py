"""The training observer against a real MLflow store (SQLite in the test's directory)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from mlflow import MlflowClient

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.training import TrainedBatch
from fleetwatch.fleet.tracking import MlflowTrainingObserver, evaluation_metrics
from fleetwatch.models.errors import TrackingError
from fleetwatch.streaming.trainer.observer import NoopObserver, TrainingObserver
from tests.unit.mlflow_store import local_settings, seeded_settings

CONFIG = {"trigger": "5 seconds", "spark": {"master": "local[2]"}, "detectors": ["pca"]}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return seeded_settings(tmp_path)


def _client(settings: Settings) -> MlflowClient:
    uri = settings.mlflow_tracking_uri
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_the_embedded_store_lives_in_the_run_directory(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)  # no store yet: the observer makes it
    assert not (settings.run_path / "mlflow" / "mlflow.db").exists()
    assert settings.mlflow_tracking_uri == f"sqlite:///{settings.run_path}/mlflow/mlflow.db"
    observer = MlflowTrainingObserver(settings)
    observer.on_start({})
    observer.on_stop()
    assert (settings.run_path / "mlflow" / "mlflow.db").is_file()
    experiment = _client(settings).get_experiment_by_name(settings.mlflow.experiment)
    assert experiment is not None
    assert experiment.artifact_location == settings.mlflow_artifacts.as_uri()


def test_a_run_logs_its_configuration_batches_and_data_range(settings: Settings) -> None:
    observer = MlflowTrainingObserver(settings, run_name="train-test")
    observer.on_start(CONFIG)
    observer.on_batch(TrainedBatch(0, 12, 1_000, 5_000))
    observer.on_batch(TrainedBatch(1, 0, None, None))
    observer.on_batch(TrainedBatch(2, 7, 500, 4_000))
    observer.on_stop()
    assert observer.run_id is not None
    client = _client(settings)
    run = client.get_run(observer.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "train-test"
    assert run.data.params == {
        "trigger": "5 seconds",
        "spark.master": "local[2]",
        "detectors": "['pca']",
    }
    history = client.get_metric_history(observer.run_id, "devices_updated")
    assert [(m.step, m.value) for m in history] == [(0, 12.0), (1, 0.0), (2, 7.0)]
    from_history = client.get_metric_history(observer.run_id, "batch_from_ms")
    assert [(m.step, m.value) for m in from_history] == [(0, 1_000.0), (2, 500.0)]
    tags = run.data.tags
    assert tags["fleetwatch.trained_from_ms"] == "500"
    assert tags["fleetwatch.trained_to_ms"] == "5000"
    assert tags["fleetwatch.batches"] == "3"
    assert tags["fleetwatch.devices_updated"] == "19"


def test_evaluation_metrics_land_in_the_run_even_after_it_ended(settings: Settings) -> None:
    observer = MlflowTrainingObserver(settings)
    observer.on_start(CONFIG)
    observer.on_stop()
    report = {
        "precision": 0.8,
        "recall": 0.5,
        "delay_p95_s": None,
        "false_alerts_per_device_day": 0.25,
        "by_kind": {"spike": {"recall": 1.0, "delay_p50_s": None}},
    }
    observer.log_evaluation(evaluation_metrics(report))
    assert observer.run_id is not None
    metrics = _client(settings).get_run(observer.run_id).data.metrics
    assert metrics == {
        "precision": 0.8,
        "recall": 0.5,
        "false_alerts_per_device_day": 0.25,
        "by_kind.spike.recall": 1.0,
    }


def test_a_long_configuration_is_logged_in_chunks(settings: Settings) -> None:
    observer = MlflowTrainingObserver(settings)
    observer.on_start({f"key{i}": i for i in range(250)})
    observer.on_stop()
    assert observer.run_id is not None
    assert len(_client(settings).get_run(observer.run_id).data.params) == 250


def test_batches_before_the_start_are_a_clear_error(settings: Settings) -> None:
    with pytest.raises(TrackingError, match="has not started"):
        MlflowTrainingObserver(settings).on_batch(TrainedBatch(0, 1, None, None))


def test_an_unreachable_store_fails_at_the_start(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    part = settings.mlflow.model_copy(update={"tracking_uri": f"sqlite:///{blocker}/x/mlflow.db"})
    broken = settings.model_copy(update={"mlflow": part})
    with pytest.raises(TrackingError):
        MlflowTrainingObserver(broken).on_start(CONFIG)


PROTOCOL = ("on_start", "on_batch", "on_stop")


def test_the_noop_observer_and_the_mlflow_one_follow_the_trainers_protocol(
    settings: Settings,
) -> None:
    mlflow_observer = MlflowTrainingObserver(settings)
    observers: list[TrainingObserver] = [NoopObserver(), mlflow_observer]
    for observer in observers:
        assert isinstance(observer, TrainingObserver)
        for name in PROTOCOL:
            # the trainer may pass any argument by name: the same names, order and defaults
            assert inspect.signature(getattr(type(observer), name)) == inspect.signature(
                getattr(TrainingObserver, name)
            ), f"{type(observer).__name__}.{name}"
        observer.on_start({"a": 1})
        observer.on_batch(TrainedBatch(0, 1, 0, 1))
        observer.on_stop()
    assert mlflow_observer.run_id is not None
    client = _client(settings)
    run = client.get_run(mlflow_observer.run_id)
    assert run.info.status == "FINISHED", "on_stop ends the run"
    assert run.data.params == {"a": "1"}
    history = client.get_metric_history(mlflow_observer.run_id, "devices_updated")
    assert [(m.step, m.value) for m in history] == [(0, 1.0)]
