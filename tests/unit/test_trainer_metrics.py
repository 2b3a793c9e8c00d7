"""The trainer's metrics: parameters published and how fresh the newest are, counted where the
publisher tells its observer, which is still told everything."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.contracts.settings import Settings, TrainSettings
from fleetwatch.contracts.training import TrainedBatch
from fleetwatch.streaming.trainer import job
from fleetwatch.streaming.trainer.job import Backfill, Training
from fleetwatch.streaming.trainer.metrics import MeteredObserver, TrainerMetrics
from fleetwatch.streaming.trainer.observer import TrainingObserver
from tests.unit.test_metrics_endpoint import free_port, scrape


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_start(self, config: Mapping[str, Any]) -> None:
        self.calls.append(("start", dict(config)))

    def on_batch(self, batch: TrainedBatch) -> None:
        b = batch
        self.calls.append(
            ("batch", b.batch_id, b.devices_updated, b.trained_from_ms, b.trained_to_ms)
        )

    def on_stop(self) -> None:
        self.calls.append(("stop",))


def test_published_parameters_and_their_freshness() -> None:
    now = [1000.0]
    registry = CollectorRegistry()
    inner = Recorder()
    observer: TrainingObserver = MeteredObserver(inner, TrainerMetrics(registry, lambda: now[0]))
    value = registry.get_sample_value
    assert math.isnan(value("fleetwatch_train_params_freshness_seconds") or 0.0)
    assert math.isnan(value("fleetwatch_train_learned_event_time_lag_seconds") or 0.0)
    observer.on_start({"mode": "live"})
    observer.on_batch(TrainedBatch(3, 40, 900_000, 990_000))
    now[0] = 1012.5
    assert value("fleetwatch_train_params_published_total") == 40
    assert value("fleetwatch_train_publishing_batches_total") == 1
    assert value("fleetwatch_train_params_freshness_seconds") == 12.5
    assert value("fleetwatch_train_learned_event_time_lag_seconds") == 1012.5 - 990
    observer.on_batch(
        TrainedBatch(4, 2, 980_000, 985_000)
    )  # older readings learned: the newest stays
    assert value("fleetwatch_train_params_published_total") == 42
    assert value("fleetwatch_train_params_freshness_seconds") == 0
    assert value("fleetwatch_train_learned_event_time_lag_seconds") == 1012.5 - 990
    observer.on_stop()
    assert inner.calls == [
        ("start", {"mode": "live"}),
        ("batch", 3, 40, 900_000, 990_000),
        ("batch", 4, 2, 980_000, 985_000),
        ("stop",),
    ]


class FakeQuery:
    isActive = False

    def exception(self) -> None:
        return None


class FakeStreams:
    """No query is running; counts the times the progress reader asked."""

    def __init__(self) -> None:
        self.asked = 0

    @property
    def active(self) -> list[object]:
        self.asked += 1
        return []


def progress_readers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("progress-")]


class FakeSpark:
    def __init__(self) -> None:
        self.streams = FakeStreams()
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("backfill", [None, Backfill(from_ms=0, to_ms=1)])
def test_a_live_trainer_serves_its_metrics_and_a_backfill_none(
    monkeypatch: pytest.MonkeyPatch, backfill: Backfill | None
) -> None:
    port = free_port()
    settings = Settings(train=TrainSettings(metrics_port=port))
    spark = FakeSpark()
    during: dict[str, Any] = {}

    def start(
        spark_: Any, settings_: Settings, observer: Any, backfill_: Any, on_failed: Any
    ) -> Training:
        during["observer"] = observer
        during["on_failed"] = on_failed
        during["readers"] = progress_readers()
        try:
            during["served"] = scrape(port)
            on_failed(2)  # two devices of a batch failed to learn
            during["after_failures"] = scrape(port)
        except OSError:
            during["served"] = None
        return Training(FakeQuery(), None, Path("/nowhere"))  # type: ignore[arg-type]

    monkeypatch.setattr(job, "build_session", lambda *args: spark)
    monkeypatch.setattr(job, "start", start)
    stop = threading.Event()
    stop.set()
    inner = Recorder()
    job.run(settings, stop, inner, backfill)
    assert spark.stopped
    assert progress_readers() == [], "the progress reader goes with the run"
    assert inner.calls == [("stop",)]
    if backfill is None:
        assert isinstance(during["observer"], MeteredObserver)
        assert during["observer"].inner is inner
        assert during["readers"] == ["progress-fleetwatch-train"]
        assert spark.streams.asked >= 1  # at least its last read, as the run ends
        assert "fleetwatch_train_params_published_total 0.0" in during["served"]
        assert "fleetwatch_train_device_failures_total 0.0" in during["served"]
        assert "fleetwatch_train_device_failures_total 2.0" in during["after_failures"]
    else:
        assert during["observer"] is inner
        assert during["on_failed"] is None
        assert during["readers"] == []
        assert spark.streams.asked == 0
        assert during["served"] is None
    with pytest.raises(OSError, match="refused"):
        scrape(port)
