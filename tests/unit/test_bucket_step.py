"""A bucket's micro-batch, as the scorer's operator and the offline quality bench run it:
parameter and champion records, the state store a worker reads on a miss, the bucket's timer."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.model_params import encode_device
from fleetwatch.models import params
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.scorer import bucket_step, detectors
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketOutput,
    MemoryStore,
    arm_timer,
    expire_bucket,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.bucket_value import dump_bucket, load_bucket
from fleetwatch.streaming.scorer.detectors import DetectorCache
from fleetwatch.streaming.scorer.device_step import Role
from fleetwatch.streaming.scorer.readings import Rows
from tests.unit.test_device_scoring import POLICY, T0, frame, json_types_only
from tests.unit.test_fleet_champion import BROKEN, SCOPE, champion_json, readings


def trained() -> tuple[int, str]:
    rng = np.random.default_rng(3)
    n = 600
    data = pd.DataFrame(
        {
            "event_ms": T0 + np.arange(n) * 1000,
            "metric": "temperature",
            "value": 21 + rng.normal(0, 0.3, n),
        }
    )
    detector = default_detector()
    for start in range(0, n, 50):
        detector.learn(data.iloc[start : start + 50])
    text = params.dumps(detector.to_params())
    return detector.version, text


def alerts(out: BucketOutput) -> list[dict[str, Any]]:
    return [json.loads(v) for _, role, v in out.records if role == Role.ALERTS]


def one(device_id: str, rows: pd.DataFrame) -> dict[str, Rows]:
    return {device_id: Rows.of(rows)}


def test_parameters_on_model_params_are_kept_and_read_back_by_a_worker_that_has_not_parsed_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    version, text = trained()
    bucket, store = new_bucket(), MemoryStore()
    t = T0 + 600_000
    record = ("b1", encode_device("b1", text, T0))
    first = BucketBatch.of(one("b1", frame([(600, t, 21.0)])), [record])
    score_bucket(bucket, first, 0, t, POLICY, store)
    assert bucket["devices"]["b1"]["params_version"] == version
    assert store.device_params["b1"][1] == version
    # another worker (nothing parsed) scores the next batch from the store
    monkeypatch.setattr(detectors, "CACHE", DetectorCache())
    monkeypatch.setattr(bucket_step, "CACHE", detectors.CACHE)
    second = BucketBatch(one("b1", frame([(601, t + 1000, 35.0)])))
    out = score_bucket(bucket, second, 0, t, POLICY, store)
    found = alerts(out)
    assert {a["detector"] for a in found} - {"fixed-baseline"}
    assert {a["params_version"] for a in found} == {version}


def test_a_champion_record_reaches_the_bucket_and_scores_its_devices() -> None:
    bucket, store = new_bucket(), MemoryStore()
    batch = BucketBatch.of(
        one("c1", readings(BROKEN, T0 + 3_600_000)), [(fleet_key(SCOPE), champion_json())]
    )
    out = score_bucket(bucket, batch, 0, T0 + 10**9, POLICY, store)
    assert bucket["fleet"] == {SCOPE: 1}
    assert store.champions[SCOPE][2] == f"fleetwatch-{SCOPE}/3"
    assert {a["model"] for a in alerts(out) if a["detector"] == "pca"} == {f"fleetwatch-{SCOPE}/3"}
    assert json_types_only({**bucket, "devices": dict(bucket["devices"])}) == []
    assert load_bucket(dump_bucket(bucket)) == bucket


def test_the_bucket_timer_is_the_earliest_devices_and_silences_those_due() -> None:
    bucket, store = new_bucket(), MemoryStore()
    batch = BucketBatch(
        {**one("e1", frame([(1, T0, 21.0)])), **one("e2", frame([(1, T0 + 5000, 21.0)]))}
    )
    score_bucket(bucket, batch, 0, T0, POLICY, store)
    due = arm_timer(bucket)
    assert due == T0 + POLICY.session_gap_ms
    assert arm_timer(bucket) is None  # registered already
    out = expire_bucket(bucket, due, T0, POLICY, MemoryStore())
    states = [json.loads(v) for device, role, v in out.records if role == Role.STATE]
    assert [(s["device_id"], s["status"]) for s in states] == [("e1", "silent")]
    assert bucket["devices"]["e2"]["timer_ms"] == T0 + 5000 + POLICY.session_gap_ms
    assert arm_timer(bucket) == T0 + 5000 + POLICY.session_gap_ms
