"""Grouping a parameter table into fleet models, without Kafka or MLflow."""

import copy
import logging
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.fleet import scope_of_metrics
from fleetwatch.fleet.model import load
from fleetwatch.fleet.publish import pooled_by_scope
from fleetwatch.fleet.tails import members_of
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.registry import default_detector
from fleetwatch.models.seasonal import SeasonalBaseline


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
    members = members_of(learned({"a": 1.0, "b": 2.0}, 4)["params"])
    pca = members["pca"]
    assert isinstance(pca, PcaDetector)
    assert scope_of_metrics(pca.metrics) == "a_b"
    assert list(members_of(SeasonalBaseline().to_params())) == ["seasonal"]


def _member(params: dict[str, Any], kind: str) -> dict[str, Any]:
    """A combined detector's member ``kind``, to be broken in place."""
    (member,) = [m for m in params["state"]["members"] if m["kind"] == kind]
    return member  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("kind", "field", "broken"),
    [
        ("pca", "sum", "not numbers"),
        ("level", "sums", [1, 2]),
        ("seasonal", "tails", "none"),
    ],
)
def test_one_devices_malformed_parameters_leave_out_that_device_alone(
    kind: str, field: str, broken: object, caplog: pytest.LogCaptureFixture
) -> None:
    table = {
        "t1": learned({"temperature": 21.0, "humidity": 40.0}, 1),
        "t2": learned({"temperature": 22.0, "humidity": 38.0}, 2),
        "t3": learned({"temperature": 20.0, "humidity": 41.0}, 9),
        "v1": learned({"rpm": 1500.0, "vibration": 0.3}, 3),
    }
    bad = copy.deepcopy(table["t3"])
    _member(bad["params"], kind)["state"][field] = broken
    table["t3"] = bad
    with caplog.at_level(logging.WARNING, logger="fleetwatch.fleet.publish"):
        pooled = pooled_by_scope(table)
    assert sorted(pooled) == ["humidity_temperature", "rpm_vibration"]
    assert pooled["humidity_temperature"][1] == 2, "the malformed device is left out, no more"
    assert pooled["humidity_temperature"][0]["pca"] is not None
    assert "'t3'" in caplog.text
    assert "do not load" in caplog.text


def test_devices_on_other_settings_leave_the_scope_pooled_on_the_most_common(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = {f"t{i}": learned({"temperature": 21.0 + i, "humidity": 40.0}, i) for i in (1, 2, 3)}
    odd = copy.deepcopy(table["t3"])
    _member(odd["params"], "pca")["hyper"]["halflife_hours"] = 48.0
    table["t3"] = odd
    with caplog.at_level(logging.WARNING, logger="fleetwatch.fleet.publish"):
        pooled = pooled_by_scope(table)
    params, _ = pooled["humidity_temperature"]
    assert params["pca"] is not None, "one device on another setting does not stop its scope"
    alone = pooled_by_scope({k: v for k, v in table.items() if k != "t3"})
    assert (
        params["pca"]["state"]["count"] == alone["humidity_temperature"][0]["pca"]["state"]["count"]
    )
    assert "t3" in caplog.text
    assert "other PCA settings" in caplog.text
