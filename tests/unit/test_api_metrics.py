"""/metrics: request latency by route template, command and delivery outcomes."""

from __future__ import annotations

from pathlib import Path

from tests.unit.api_support import running_api


def test_metrics_count_requests_by_route_template_and_commands_by_outcome(tmp_path: Path) -> None:
    for api in running_api(tmp_path):
        api.post("/devices", json={"device_id": "d1"})
        for device in ("d1", "d2", "d3"):
            api.get(f"/devices/{device}")
        api.post(
            "/devices/d1/commands",
            scope="operate",
            headers={"Idempotency-Key": "m"},
            json={"name": "reboot"},
        )
        text = api.client.get("/metrics").text
        assert (
            'fleetwatch_api_request_seconds_count{method="GET",route="/devices/{device_id}",'
            'status="2xx"} 1.0' in text
        )
        assert (
            'fleetwatch_api_request_seconds_count{method="GET",route="/devices/{device_id}",'
            'status="4xx"} 2.0' in text
        )
        assert "/devices/d2" not in text
        assert 'fleetwatch_api_commands_total{outcome="issued"} 1.0' in text
