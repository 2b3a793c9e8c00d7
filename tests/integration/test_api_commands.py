"""Commands end to end on the real stack: API → device.commands → gateway → MQTT → simulated
device → ack → gateway → device.command-acks → API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.api_stack import ApiProcess, admin_key, start_api
from tests.integration.conftest import Isolated
from tests.polling import wait_until


def command(api: ApiProcess, device: str, key: str, **body: Any) -> dict[str, Any]:
    response = api.post(f"/devices/{device}/commands", headers={"Idempotency-Key": key}, json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def settled(api: ApiProcess, command_id: str) -> dict[str, Any]:
    """The command once it has an outcome, else an empty dict (falsy: keep waiting)."""
    body: dict[str, Any] = api.get(f"/commands/{command_id}").json()
    return body if body["status"] not in ("pending", "sent") else {}


def test_a_simulated_device_acknowledges_commands_sent_through_the_api(
    isolated: Isolated,
) -> None:
    prefix = f"c{isolated.tag}"
    device, offline = f"{prefix}-0000", f"{prefix}-gone"
    isolated.start("gateway", "gateway")
    api = start_api(isolated, admin_key(Path(isolated.env["FLEETWATCH_RUN_DIR"])))
    with isolated.mqtt_client() as client:  # the gateway subscribed while the API started
        isolated.await_gateway(client)
    for d in (device, offline):
        assert api.post("/devices", json={"device_id": d, "kind": "sim"}).status_code == 201
    isolated.start(
        "sim", "sim", "run", "--devices", "1", "--rate", "5", "--prefix", prefix, "--quiet"
    )
    # the device listens for commands once it reports
    wait_until(
        lambda: api.get(f"/devices/{device}/telemetry").json()["count"] >= 2,
        30,
        "the device's readings in the API",
    )

    ok = command(api, device, "k-interval", name="set_interval", args={"interval_ms": 100})
    dance = command(api, device, "k-dance", name="dance")
    lost = command(api, offline, "k-offline", name="reboot", ttl_s=3)
    assert ok["status"] == "sent"

    acked = wait_until(lambda: settled(api, ok["command_id"]), 30, "the ack of set_interval")
    assert (acked["status"], acked["ack_status"]) == ("acked", "ok")
    assert acked["answered_ms"] >= acked["sent_ms"] >= acked["issued_ms"]
    failed = wait_until(lambda: settled(api, dance["command_id"]), 30, "the answer to dance")
    assert (failed["status"], failed["detail"]) == ("failed", "unknown command 'dance'")
    timed_out = wait_until(lambda: settled(api, lost["command_id"]), 30, "the offline timeout")
    assert timed_out["status"] == "timed_out"

    # a retried request (same Idempotency-Key) is the same command, not a second one
    again = api.post(
        f"/devices/{device}/commands",
        headers={"Idempotency-Key": "k-interval"},
        json={"name": "set_interval", "args": {"interval_ms": 100}},
    )
    assert (again.status_code, again.json()["command_id"]) == (200, ok["command_id"])
    metrics = api.get("/metrics").text
    assert 'fleetwatch_api_commands_total{outcome="acked"} 1.0' in metrics
    assert 'fleetwatch_api_commands_total{outcome="timed_out"} 1.0' in metrics
