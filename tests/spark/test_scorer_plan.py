"""The stateful scorer's Spark plan on local Spark, fed from files in steps (availableNow), so
that state, the watermark and parameter updates carry from one micro-batch run to the next."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.model_params import encode_device
from fleetwatch.contracts.quarantine import lift_key, lift_value
from fleetwatch.contracts.settings import Settings
from fleetwatch.models import params
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.progress_metrics import progress_exported
from fleetwatch.streaming.scorer.batch_counts import COUNT_ROLE, ScorerMetrics
from fleetwatch.streaming.scorer.job import (
    CODE_GENERATION_OFF,
    OUTPUT_SCHEMA,
    QUERY_NAME,
    query_confs,
    scored_frame,
    scorer_input,
)
from fleetwatch.streaming.scorer.processor import device_scorer
from fleetwatch.streaming.spark_session import build_session
from tests.jvm import with_quick_jit
from tests.polling import wait_until
from tests.unit.test_fleet_champion import BROKEN, SCOPE, champion_json

T0 = 1_763_700_000_000
SETTINGS = Settings()
LIFTS = SETTINGS.topics.quarantine_lifts
TOPICS = SETTINGS.topics


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(with_quick_jit(SETTINGS), "fleetwatch-test-scorer")
    yield session
    session.stop()


def reading(device: str, seq: int, event_ms: int, **metrics: float) -> str:
    return json.dumps(
        {
            "v": 1,
            "device_id": device,
            "seq": seq,
            "event_ms": event_ms,
            "device_event_ms": event_ms,
            "device_sent_ms": event_ms,
            "received_ms": event_ms + 5,
            "clock_offset_ms": 0,
            "metrics": metrics,
        }
    )


def kafka_row(line: str) -> str:
    """A line of the raw source as the Kafka source gives it: the device id as the key, the
    event time as the timestamp (what the gateway writes); a line that is not a reading keeps
    a key and a timestamp of its own."""
    try:
        r = json.loads(line)
        key, event_ms = r["device_id"], r["event_ms"]
    except (ValueError, KeyError, TypeError):
        key, event_ms = "d1", T0
    at = datetime.fromtimestamp(event_ms / 1000, tz=UTC).isoformat()
    return json.dumps({"key": key, "value": line, "timestamp": at, "partition": 0, "offset": 7})


class Steps:
    """Append files to the two sources, run the query to the end of them, collect its rows.
    ``plan``: the operator's input to the query's rows (the scorer's by default)."""

    def __init__(self, spark: Any, root: Path, plan: Any = None) -> None:
        self.spark, self.root = spark, root
        self.plan = plan or (lambda inputs: scored_frame(inputs, SETTINGS))
        self.name: str | None = None
        self.raw, self.params = root / "raw", root / "params"
        self.raw.mkdir()
        self.params.mkdir()
        self.n = 0

    def run(
        self,
        lines: list[str],
        updates: list[tuple[str, str]] | list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    ) -> list[dict[str, Any]]:
        """``updates``: (key, value) on ``model.params`` (a lift's key on the lifts topic), or
        (key, value, topic)."""
        self.n += 1
        if lines:
            body = "\n".join(kafka_row(line) for line in lines)
            (self.raw / f"{self.n}.json").write_text(body + "\n")
        if updates:
            body = "\n".join(  # as Kafka gives them: a place on model.params each
                json.dumps(
                    {
                        "key": k,
                        "value": v,
                        "topic": u[2] if len(u) > 2 else _topic_of(k),
                        "partition": 0,
                        "offset": 100 * self.n + i,
                    }
                )
                for i, u in enumerate(updates)
                for k, v in [u[:2]]
            )
            (self.params / f"{self.n}.json").write_text(body + "\n")
        raw = self.spark.readStream.schema(
            "key STRING, value STRING, timestamp TIMESTAMP, partition INT, offset LONG"
        ).json(str(self.raw))
        par = self.spark.readStream.schema(
            "key STRING, value STRING, topic STRING, partition INT, offset LONG"
        ).json(str(self.params))
        frame = self.plan(scorer_input(raw, par, "1 minute", LIFTS))
        got: list[dict[str, Any]] = []

        def collect(batch: Any, _: int) -> None:
            got.extend(r.asDict() for r in batch.collect())

        writer = frame.writeStream.foreachBatch(collect)
        if self.name is not None:
            writer = writer.queryName(self.name)
        query = (
            writer.option("checkpointLocation", str(self.root / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return got


def _topic_of(key: str) -> str:
    return LIFTS if key.startswith("quarantine:") else SETTINGS.topics.model_params


def values(rows: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    return [json.loads(r["value"]) for r in rows if r["topic"] == topic]


def trained(device: str) -> tuple[int, str]:
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
    for start in range(0, n, 100):
        detector.learn(data.iloc[start : start + 100])
    p = params.dumps(detector.to_params())
    return detector.version, encode_device(device, p, published_ms=T0)


def test_alerts_state_sessions_late_data_and_a_parameter_update(spark: Any, tmp_path: Path) -> None:
    steps = Steps(spark, tmp_path)
    t = T0 + 600_000
    first = steps.run(
        [reading("d1", i, t + i * 1000, temperature=21.0) for i in range(5)]
        + [reading("d1", 5, t + 5000, temperature=60.0), reading("d2", 0, t, temperature=20.0)]
        + ["{not json", reading("d1", 5, t + 5000, temperature=60.0)]  # garbage, a repeat
    )
    opened = values(first, TOPICS.alerts)
    assert [(a["device_id"], a["status"], a["params_version"]) for a in opened] == [
        ("d1", "open", 0)
    ]
    states = {s["device_id"]: s for s in values(first, TOPICS.device_state)}
    assert states["d1"]["open_alerts"] == [opened[0]["alert_id"]]
    assert states["d2"]["status"] == "ok"
    assert {s["device_id"] for s in values(first, TOPICS.device_sessions)} == {"d1", "d2"}
    assert {r["key"] for r in first if r["topic"] != TOPICS.device_sessions} == {"d1", "d2"}
    sessions = [
        (r["key"], json.loads(r["value"])) for r in first if r["topic"] == TOPICS.device_sessions
    ]
    assert all(key == s["session_id"] for key, s in sessions)  # compacted by session
    dead = [r for r in first if r["topic"] == TOPICS.telemetry_deadletter]
    assert [(r["key"], r["value"]) for r in dead] == [("d1", "{not json")]
    headers = dict(json.loads(dead[0]["headers"]))
    assert headers["fw.reason"].startswith("not JSON")
    assert (headers["fw.stage"], headers["fw.source_offset"]) == ("score", "7")

    # learned parameters arrive; the next spike is scored with them, and a reading far
    # behind the watermark goes to telemetry.late
    version, record = trained("d1")
    second = steps.run(
        [
            reading("d1", 6, t + 300_000, temperature=21.0),
            reading("d1", 7, t + 301_000, temperature=35.0),
        ],
        updates=[("d1", record)],
    )
    scored = [a for a in values(second, TOPICS.alerts) if a["status"] == "open"]
    assert scored
    assert {a["params_version"] for a in scored} == {version}
    third = steps.run([reading("d1", 100, t + 2500, temperature=99.0)])
    late = values(third, TOPICS.telemetry_late)
    assert [(x["record"]["seq"], x["record"]["metrics"]) for x in late] == [
        (100, {"temperature": 99.0})
    ]
    assert values(third, TOPICS.alerts) == []


def test_a_champion_on_model_params_reaches_devices_in_every_bucket(
    spark: Any, tmp_path: Path
) -> None:
    devices = [f"fleet-d{i}" for i in range(8)]
    steps = Steps(spark, tmp_path)
    t = T0 + 3_600_000

    def broken(device: str) -> list[str]:
        return [
            reading(device, seq, t + seq * 1000, temperature=temp, humidity=hum)
            for seq, temp, hum in BROKEN
        ]

    before = steps.run([line for d in devices for line in broken(d)[:2]])  # normal readings
    assert values(before, TOPICS.alerts) == []
    after = steps.run(
        [line for d in devices for line in broken(d)[2:]],
        updates=[(fleet_key(SCOPE), champion_json(model_version=4))],
    )
    opened = [a for a in values(after, TOPICS.alerts) if a["detector"] == "pca"]
    assert {a["device_id"] for a in opened} == set(devices)
    assert {a["model"] for a in opened} == {f"fleetwatch-{SCOPE}/4"}


def test_the_counts_reach_the_progress_report_on_a_checkpoint_of_the_plan_before_them(
    spark: Any, tmp_path: Path
) -> None:
    """A checkpoint written by the operator alone (the plan before the counts) resumes under
    the counts' observe and filter: both are stateless. Each batch's counts are in its
    progress report, and no count row goes on to a topic."""

    def operator_only(inputs: Any) -> Any:
        return inputs.groupBy("bucket").transformWithStateInPandas(
            statefulProcessor=device_scorer(SETTINGS),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="EventTime",
        )

    t = T0 + 600_000
    steps = Steps(spark, tmp_path, plan=operator_only)
    steps.run([reading("c1", i, t + i * 1000, temperature=21.0) for i in range(3)])
    steps.plan = lambda inputs: scored_frame(inputs, SETTINGS)
    steps.name = QUERY_NAME
    registry = CollectorRegistry()
    value = registry.get_sample_value
    with progress_exported(spark, "score", registry, (ScorerMetrics(registry).record,)):
        rows = steps.run(
            [
                reading("c1", 2, t + 2000, temperature=21.0),  # a repeat
                reading("c1", 3, t + 3000, temperature=60.0),  # opens an alert
                "{not json",
            ]
        )
        wait_until(
            lambda: value("fleetwatch_score_readings_scored_total") == 1,
            30,
            "the batch's progress report",
        )
    assert value("fleetwatch_score_duplicate_readings_total") == 1
    assert value("fleetwatch_score_unreadable_records_total") == 1
    assert value("fleetwatch_score_dead_letters_total") == 1
    assert value("fleetwatch_score_quarantined_devices") == 0
    labels = {"event": "open", "kind": "fixed-baseline", "severity": "critical"}
    assert value("fleetwatch_score_alert_events_total", labels) == 1
    assert (value("fleetwatch_streaming_batches_total", {"query": "score"}) or 0) >= 1
    assert [a["status"] for a in values(rows, TOPICS.alerts)] == ["open"]
    assert all(r["topic"] and r["role"] != COUNT_ROLE for r in rows)


def test_lifts_count_only_from_their_topic_and_reach_their_devices_bucket(
    spark: Any, tmp_path: Path
) -> None:
    steps = Steps(spark, tmp_path, plan=lambda inputs: inputs)
    _, own = trained("d4")
    lift = lift_value("d1", T0)
    rows = steps.run(
        [reading("d1", 1, T0, temperature=21.0)],
        [
            (lift_key("d1"), lift, LIFTS),
            (lift_key("d2"), lift_value("d2", T0), SETTINGS.topics.model_params),
            ("d3", own, LIFTS),
            ("d4", own, SETTINGS.topics.model_params),
        ],
    )
    updates = {r["device_id"]: r for r in rows if r["src"] == "p"}
    assert set(updates) == {lift_key("d1"), "d4"}
    reading_bucket = next(r["bucket"] for r in rows if r["src"] == "r" and r["device_id"] == "d1")
    assert updates[lift_key("d1")]["bucket"] == reading_bucket
    assert updates[lift_key("d1")]["params"] == lift


def test_one_shuffle_partition_and_a_checkpoint_started_with_two_keep_the_devices_state(
    spark: Any, tmp_path: Path
) -> None:
    """The scoring query runs its stateful step in ``score.shuffle_partitions`` tasks (one);
    a checkpoint started with two goes on with two, each device's state where it was: the
    alerts opened before resolve after."""
    devices = [f"p-d{i}" for i in range(8)]  # buckets in both of two partitions
    t = T0 + 7_200_000
    spikes = [reading(d, 0, t, temperature=60.0) for d in devices]
    calm = [reading(d, s, t + s * 1000, temperature=21.0) for d in devices for s in (1, 2, 3)]
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        (tmp_path / "two").mkdir()
        two = Steps(spark, tmp_path / "two")
        opened = {a["device_id"]: a["alert_id"] for a in values(two.run(spikes), TOPICS.alerts)}
        assert set(opened) == set(devices)
        for key, value in query_confs(SETTINGS).items():
            spark.conf.set(key, value)
        assert spark.conf.get("spark.sql.shuffle.partitions") == "1"
        resolved = [a for a in values(two.run(calm), TOPICS.alerts) if a["status"] == "resolve"]
        assert {a["device_id"]: a["alert_id"] for a in resolved} == opened
        assert state_partitions(tmp_path / "two") == ["0", "1"]
        (tmp_path / "one").mkdir()
        one = Steps(spark, tmp_path / "one")
        assert {a["device_id"] for a in values(one.run(spikes), TOPICS.alerts)} == set(devices)
        resolved = [a for a in values(one.run(calm), TOPICS.alerts) if a["status"] == "resolve"]
        assert {a["device_id"] for a in resolved} == set(devices)
        assert state_partitions(tmp_path / "one") == ["0"]
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
        for key in CODE_GENERATION_OFF:
            spark.conf.unset(key)


def state_partitions(root: Path) -> list[str]:
    """The partitions of the stateful operator's state in the checkpoint of :class:`Steps`."""
    return sorted(p.name for p in (root / "checkpoint/state/0").iterdir() if p.name.isdigit())
