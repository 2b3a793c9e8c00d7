"""Grouping a parameter table into fleet models, without Kafka or MLflow."""

from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.fleet.model import load
from fleetwatch.fleet.publish import pca_params, pooled_by_scope, scope_of
from fleetwatch.models.registry import default_detector


def learned(metrics: dict[str, float], seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    rows = [
        {"event_ms": 1_700_000_000_000 + i * 60_000, "metric": m, "value": v + rng.normal(0, 0.5)}
        for i in range(200)
        for m, v in metrics.items()
    ]
    detector = default_detector()
    detector.learn(pd.DataFrame(rows))
    return {"device_id": f"d{seed}", "params": detector.to_params()}


def test_devices_are_pooled_by_the_metrics_they_report() -> None:
    table = {
        "t1": learned({"temperature": 21.0, "humidity": 40.0}, 1),
        "t2": learned({"temperature": 22.0, "humidity": 38.0}, 2),
        "v1": learned({"rpm": 1500.0, "vibration": 0.3}, 3),
        "new": {"device_id": "new", "params": default_detector().to_params()},  # learned nothing
    }
    pooled = pooled_by_scope(table)
    assert sorted(pooled) == ["humidity_temperature", "rpm_vibration"]
    assert pooled["humidity_temperature"][1] == 2
    assert pooled["rpm_vibration"][1] == 1
    assert pooled["humidity_temperature"][0]["kind"] == "fleet"
    assert pooled["humidity_temperature"][0]["pca"]["kind"] == "pca"


def test_devices_of_one_metric_are_pooled_by_their_streams_tails_alone() -> None:
    table = {
        "s1": learned({"temperature": 21.0}, 5),
        "s2": learned({"temperature": 23.0}, 6),
        "p1": learned({"pressure": 1.2}, 7),
        "t1": learned({"temperature": 21.0, "humidity": 40.0}, 8),
        "new": {"device_id": "new", "params": default_detector().to_params()},  # learned nothing
    }
    pooled = pooled_by_scope(table)
    assert sorted(pooled) == ["humidity_temperature", "pressure", "temperature"]
    params, devices = pooled["temperature"]
    assert devices == 2
    assert params["pca"] is None
    assert params["trained_to_ms"] is None
    detector, tails = load(params)
    assert detector is None
    assert sorted(tails["level"]) == ["temperature"]
    assert pooled["humidity_temperature"][0]["pca"] is not None, "two metrics: a joint model"


def test_the_pca_member_of_a_combined_detector_is_found() -> None:
    params = learned({"a": 1.0, "b": 2.0}, 4)["params"]
    pca = pca_params(params)
    assert pca is not None
    assert pca["kind"] == "pca"
    assert scope_of(pca) == "a_b"
    assert pca_params({"kind": "seasonal", "state": {}}) is None
