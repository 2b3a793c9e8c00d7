"""Readiness on a real stack: the gateway's ``/readyz`` is 200 once it has subscribed and 503
while its Kafka broker is down (and 200 again when it is back); the API's stays 200 with
``kafka: "unreachable"`` and what is degraded, since its reads come from its database.

Runs on a private stack (own ports and run dir), since it stops the broker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetwatch.stack.kafka import KafkaBroker
from tests.integration.conftest import free_port
from tests.integration.private_stack import Private, private_stack
from tests.polling import wait_until


@pytest.fixture
def private(tmp_path: Path) -> Iterator[Private]:
    extra = {
        "FLEETWATCH_GATEWAY__METRICS_PORT": str(free_port()),
        "FLEETWATCH_API__PORT": str(free_port()),
    }
    with private_stack(tmp_path / "run", extra) as stack:
        yield stack


def start(env: dict[str, str], stage: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "fleetwatch.cli.main", stage],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def readyz(port: str) -> tuple[int, dict[str, Any]]:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
    except httpx.HTTPError as exc:
        return 0, {"error": str(exc)}
    return response.status_code, response.json()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_the_gateway_needs_kafka_to_be_ready_and_the_api_does_not(
    private: Private, tmp_path: Path
) -> None:
    settings, env = private
    gateway_port, api_port = env["FLEETWATCH_GATEWAY__METRICS_PORT"], env["FLEETWATCH_API__PORT"]
    gateway_log = tmp_path / "gateway.log"
    procs = [start(env, "gateway", gateway_log), start(env, "api", tmp_path / "api.log")]
    try:
        wait_until(lambda: readyz(gateway_port)[0] == 200, 60, "the gateway ready")
        assert "subscribed to" in gateway_log.read_text()
        assert readyz(gateway_port)[1] == {
            "status": "ready",
            "mqtt": "1/1 workers connected and subscribed",
            "kafka": "ok",
        }
        assert httpx.get(f"http://127.0.0.1:{gateway_port}/healthz").status_code == 200
        wait_until(lambda: readyz(api_port)[0] == 200, 60, "the API ready")
        assert readyz(api_port)[1]["kafka"] == "ok"

        broker = KafkaBroker(settings)
        assert broker.proc.stop()
        wait_until(lambda: readyz(gateway_port)[0] == 503, 30, "the gateway not ready")
        down = readyz(gateway_port)
        assert down[0] == 503, down
        assert down[1]["kafka"].startswith("unreachable"), down
        assert down[1]["mqtt"] == "1/1 workers connected and subscribed"
        assert httpx.get(f"http://127.0.0.1:{gateway_port}/healthz").status_code == 200
        api_status, api_body = readyz(api_port)
        assert api_status == 200, api_body
        assert (api_body["database"], api_body["kafka"]) == ("ok", "unreachable")
        assert "commands" in api_body["degraded"]

        assert broker.start()
        broker.wait_ready()
        wait_until(lambda: readyz(gateway_port)[0] == 200, 60, "the gateway ready again")
    finally:
        for proc in procs:
            stop(proc)
