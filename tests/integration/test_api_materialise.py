"""The API on the real stack: it materialises every topic it reads, and a restart neither loses
nor doubles anything (offsets are committed after the rows).

Upserts are idempotent, so the rows alone cannot tell a restart that resumed from its committed
offsets from one that read everything again: the restarted process's count of records
materialised (``fleetwatch_api_materialised_records_total``, per process) can. And a kill
while the rows of polled records cannot be written (a trigger the test adds fails them) must
find those records' offsets uncommitted, and their rows there after the restart."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from fleetwatch.contracts.devices import DeviceSession, DeviceState, session_id
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.kafka_config import client_config
from tests.integration.api_stack import ApiProcess, admin_key, produce, start_api
from tests.integration.conftest import Isolated
from tests.polling import wait_until
from tests.unit.api_support import make_alert


def materialised(api: ApiProcess) -> dict[str, float]:
    """Records this API process has materialised since it started, by topic."""
    pattern = r'^fleetwatch_api_materialised_records_total\{topic="([^"]+)"\} (\S+)$'
    return {
        topic: float(count)
        for topic, count in re.findall(pattern, api.get("/metrics").text, re.MULTILINE)
    }


def committed(isolated: Isolated, topic: str) -> int:
    """The records of ``topic`` the API's consumer group has committed (summed offsets)."""
    consumer = Consumer(
        client_config(
            isolated.settings.kafka,
            {
                "group.id": isolated.env["FLEETWATCH_API__CONSUMER_GROUP"],
                "enable.auto.commit": False,
            },
        )
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        offsets = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return sum(max(tp.offset, 0) for tp in offsets)
    finally:
        consumer.close()


@contextmanager
def failing_inserts(database: Path, table: str) -> Iterator[None]:
    """Every insert into ``table`` fails, as a write to a locked database does: with an
    ``OperationalError`` (the trigger reads a table that does not exist), a failure of the
    database, not a record the store refuses. The API reads on, and its write fails at once
    and on each retry until the trigger is dropped (holding SQLite's write lock fails it too,
    but only after the API's 30 s busy timeout)."""
    db = sqlite3.connect(database, isolation_level=None, timeout=30)
    try:
        db.execute(
            f"CREATE TRIGGER failed_by_the_test BEFORE INSERT ON {table} "
            "BEGIN SELECT * FROM not_there_while_the_test_says; END"
        )
        yield
        db.execute("DROP TRIGGER failed_by_the_test")
    finally:
        db.close()


def test_records_are_materialised_and_a_restart_neither_loses_nor_doubles(
    isolated: Isolated,
) -> None:
    t = isolated.topics
    device = f"m{isolated.tag}"
    opened = make_alert(device, 1, 1_000)
    updated = make_alert(device, 2, 2_000, "update", 1, start_ms=1_000)
    other = make_alert(device, 5, 5_000, metric="vibration")
    state = DeviceState(
        device_id=device,
        status="alerting",
        last_seen_ms=5_000,
        last_received_ms=5_010,
        last_seq=5,
        last_values={"temperature": 45.0},
        open_alerts=[opened.alert_id, other.alert_id],
        params_version=2,
        clock_offset_ms=3,
        session_id=session_id(device, 1_000),
        updated_ms=5_100,
    )
    session = DeviceSession(
        session_id=session_id(device, 1_000),
        device_id=device,
        start_ms=1_000,
        end_ms=5_000,
        readings=5,
        first_seq=1,
        last_seq=5,
    )
    params = {
        "device_id": device,
        "kind": "seasonal",
        "schema": 1,
        "version": 2,
        "trained_from_ms": 1_000,
        "trained_to_ms": 4_000,
        "params": {"k": 1},
        "published_ms": 4_500,
    }
    reading = TelemetryRecord(
        device_id=device,
        seq=5,
        event_ms=5_000,
        device_event_ms=4_997,
        device_sent_ms=4_998,
        received_ms=5_010,
        metrics={"temperature": 45.0},
    )
    produce(
        isolated,
        t.alerts,
        [(device, a.model_dump_json().encode()) for a in (opened, updated, other)],
    )
    produce(isolated, t.alerts, [(device, b"not json")])
    produce(isolated, t.device_state, [(device, state.model_dump_json().encode())])
    produce(isolated, t.device_sessions, [(device, session.model_dump_json().encode())])
    produce(isolated, t.model_params, [(device, json.dumps(params).encode())])
    produce(isolated, t.telemetry_raw, [(device, reading.model_dump_json().encode())])

    key = admin_key(Path(isolated.env["FLEETWATCH_RUN_DIR"]))
    # the killed API's consumer holds its partitions until the broker gives up on it: the
    # broker's shortest session, not librdkafka's 45 s, for the restart after the kill below
    isolated.env["FLEETWATCH_API__CONSUMER_SESSION_TIMEOUT_S"] = "6"
    api = start_api(isolated, key)
    wait_until(lambda: api.get("/alerts").json()["count"] == 2, 30, "both episodes")
    wait_until(
        lambda: api.get(f"/devices/{device}/telemetry").json()["count"] == 1, 30, "a reading"
    )
    body = api.get(f"/devices/{device}").json()
    assert (body["status"], body["kind"], body["alert_count"]) == ("alerting", None, 2)
    assert body["state"]["open_alerts"] == [opened.alert_id, other.alert_id]
    assert api.get(f"/devices/{device}/model").json()["version"] == 2
    assert api.get(f"/devices/{device}/sessions").json()["data"][0]["readings"] == 5
    episode = api.get(f"/alerts/{opened.alert_id}").json()
    assert (episode["status"], [e["revision"] for e in episode["events"]]) == ("update", [0, 1])
    metrics = api.get("/metrics").text
    assert f'fleetwatch_api_skipped_records_total{{topic="{t.alerts}"}} 1.0' in metrics
    # the record that is not JSON: a dead letter, as it was, with the reason and its place
    wait_until(
        lambda: sum(isolated.end_offsets(t.telemetry_deadletter).values()) >= 1,
        30,
        "the API's dead letter",
    )
    dead = isolated.read_all(t.telemetry_deadletter, 1)
    assert [(d.key, d.value) for d in dead] == [(device.encode(), b"not json")]
    headers = dead[0].headers
    assert (headers["fw.stage"], headers["fw.source_topic"]) == (b"api", t.alerts.encode())
    assert headers["fw.source_offset"] == b"3"  # after the three alert events
    assert headers["fw.reason"].startswith(b"not a valid alerts record: ")
    wait_until(
        lambda: (
            f'fleetwatch_api_materialiser_lag_records{{topic="{t.alerts}"}} 0.0'
            in api.get("/metrics").text
        ),
        15,
        "the materialiser's lag on the alerts topic to be measured as 0",
    )

    wait_until(lambda: committed(isolated, t.alerts) == 4, 15, "the alerts' offsets committed")
    # three events and the record that is not JSON (counted once committed)
    wait_until(lambda: materialised(api).get(t.alerts) == 4, 15, "the alerts counted")

    proc = isolated.procs.pop("api")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, "the API must stop cleanly on SIGTERM"

    resolved = make_alert(device, 3, 3_000, "resolve", 2, start_ms=1_000)
    produce(
        isolated, t.alerts, [(device, a.model_dump_json().encode()) for a in (opened, resolved)]
    )
    api = start_api(isolated, key, name="api-again")
    wait_until(
        lambda: api.get(f"/alerts/{opened.alert_id}").json()["status"] == "resolve",
        30,
        "the resolution after the restart",
    )
    episode = api.get(f"/alerts/{opened.alert_id}").json()
    assert [e["revision"] for e in episode["events"]] == [0, 1, 2]
    assert api.get("/alerts").json()["count"] == 2
    assert api.get("/alerts", params={"state": "resolved"}).json()["count"] == 1
    # from the committed offsets on: the two new records, not the six of the whole topic
    wait_until(lambda: committed(isolated, t.alerts) == 6, 15, "the new offsets committed")
    wait_until(lambda: t.alerts in materialised(api), 15, "the new records counted")
    assert materialised(api) == {t.alerts: 2.0}

    # Killed while the rows of records it has polled cannot be written: their offsets must not
    # be committed, and the restarted API must store them (and read nothing else again).
    database = Path(isolated.env["FLEETWATCH_RUN_DIR"]) / "api.db"
    log = Path(isolated.env["FLEETWATCH_RUN_DIR"]) / "api-again.log"
    later = make_alert(device, 7, 7_000, "update", 1, start_ms=5_000, metric="vibration")
    with failing_inserts(database, "alert_events"):
        produce(isolated, t.alerts, [(device, later.model_dump_json().encode())])
        wait_until(
            lambda: "materialiser: a step failed" in log.read_text(),
            90,
            "the materialiser to fail to write the polled record",
        )
        assert committed(isolated, t.alerts) == 6, "offsets committed before their rows"
        proc = isolated.procs.pop("api-again")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert committed(isolated, t.alerts) == 6
    api = start_api(isolated, key, name="api-third")
    wait_until(
        lambda: api.get(f"/alerts/{other.alert_id}").json()["status"] == "update",
        120,  # the killed consumer holds its partitions until its group session times out
        "the record the killed API could not store",
    )
    assert [e["revision"] for e in api.get(f"/alerts/{other.alert_id}").json()["events"]] == [
        0,
        1,
    ]
    wait_until(lambda: committed(isolated, t.alerts) == 7, 15, "its offset committed")
    wait_until(lambda: t.alerts in materialised(api), 15, "the new record counted")
    assert materialised(api) == {t.alerts: 1.0}
