"""The API on the real stack: it materialises every topic it reads, and a restart neither loses
nor doubles anything (offsets are committed after the rows)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from fleetwatch.contracts.devices import DeviceSession, DeviceState, session_id
from fleetwatch.contracts.telemetry import TelemetryRecord
from tests.integration.api_stack import admin_key, produce, start_api
from tests.integration.conftest import Isolated
from tests.polling import wait_until
from tests.unit.api_support import make_alert


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
    wait_until(
        lambda: (
            f'fleetwatch_api_materialiser_lag_records{{topic="{t.alerts}"}} 0.0'
            in api.get("/metrics").text
        ),
        15,
        "the materialiser's lag on the alerts topic to be measured as 0",
    )

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
