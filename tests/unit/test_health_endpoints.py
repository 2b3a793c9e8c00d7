"""A stage's endpoint: ``/metrics`` as before, ``/healthz`` while the process answers,
``/readyz`` 200 or 503 from the stage's readiness check with a JSON body, and a check that
raises answered as not ready instead of breaking the server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from fleetwatch.runtime import Readiness, serve_metrics
from tests.unit.test_metrics_endpoint import free_port

SETTING = "FLEETWATCH_TEST__METRICS_PORT"


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def test_metrics_healthz_and_readyz_from_the_stages_check() -> None:
    registry = CollectorRegistry()
    Counter("fleetwatch_test_things", "Things", registry=registry).inc(2)
    state = {"ready": False}

    def ready() -> Readiness:
        return Readiness(state["ready"], {"query": "active" if state["ready"] else "not started"})

    port = free_port()
    with serve_metrics(registry, port, SETTING, ready=ready):
        status, body = get(port, "/metrics")
        assert status == 200
        assert "fleetwatch_test_things_total 2.0" in body
        assert get(port, "/healthz") == (200, json.dumps({"status": "ok"}))
        status, body = get(port, "/readyz")
        assert status == 503
        assert json.loads(body) == {"status": "not ready", "query": "not started"}
        state["ready"] = True
        status, body = get(port, "/readyz")
        assert status == 200
        assert json.loads(body) == {"status": "ready", "query": "active"}


def test_a_raising_readiness_check_is_not_ready_and_the_server_carries_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> Readiness:
        raise RuntimeError("the JVM went away")

    port = free_port()
    with serve_metrics(CollectorRegistry(), port, SETTING, ready=broken):
        for _ in range(2):
            status, body = get(port, "/readyz")
            assert status == 503
            answer: dict[str, Any] = json.loads(body)
            assert answer == {
                "status": "not ready",
                "error": "RuntimeError: the JVM went away",
            }
        assert get(port, "/healthz")[0] == 200
    assert "the readiness check failed" in caplog.text


def test_without_a_check_the_stage_is_ready_while_it_answers() -> None:
    port = free_port()
    with serve_metrics(CollectorRegistry(), port, SETTING):
        assert get(port, "/readyz") == (200, json.dumps({"status": "ready"}))
    with pytest.raises(urllib.error.URLError, match="refused"):
        get(port, "/healthz")
