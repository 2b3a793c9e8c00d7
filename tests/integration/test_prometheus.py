"""`fleetwatch stack up --with-prometheus` on the real stack: Prometheus runs from Debian's
binary, `stack status` lists it, it scrapes the broker's exporter, and a rewritten file_sd
targets file is followed without a restart. Prometheus is stopped again if this test started
it; the brokers are left to the session."""

from __future__ import annotations

import math

import httpx
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.prometheus import PrometheusServer, default_targets
from tests.integration.conftest import fleetwatch, free_port
from tests.polling import wait_until


def value(server: PrometheusServer, query: str) -> float:
    body = httpx.get(f"{server.url}/api/v1/query", params={"query": query}, timeout=10).json()
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else math.nan


def test_stack_up_with_prometheus_scrapes_the_broker_and_follows_its_target_files(
    stack_settings: Settings,
) -> None:
    server = PrometheusServer(stack_settings)
    was_running = server.proc.running()
    registry = CollectorRegistry()
    Gauge("fleetwatch_test_probe", "a stage stand-in", registry=registry).set(7)
    port = free_port()
    httpd, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        up = fleetwatch("stack", "up", "--with-prometheus")
        assert up.returncode == 0, up.stderr
        status = fleetwatch("stack", "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "prometheus" in status.stdout
        assert server.ready()

        if KafkaBroker(stack_settings).metrics_agent is not None:
            wait_until(
                lambda: value(server, 'up{job="kafka"}') == 1, 30, "the broker's exporter scraped"
            )
        server.write_targets({"api": [f"127.0.0.1:{port}"]})
        wait_until(
            lambda: value(server, 'fleetwatch_test_probe{job="api"}') == 7,
            60,
            "the rewritten targets file followed",
        )
    finally:
        server.write_targets(default_targets(stack_settings))
        httpd.shutdown()
        thread.join(10)
        if not was_running:
            server.proc.stop()
