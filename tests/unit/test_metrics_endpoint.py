"""A stage's metrics endpoint: served while the stage runs, gone when it stops, and a port
that cannot be bound stops the stage at start with the setting to change."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.runtime import serve_metrics


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_the_registry_is_served_while_the_block_runs() -> None:
    registry = CollectorRegistry()
    Counter("fleetwatch_test_things", "Things", registry=registry).inc(3)
    port = free_port()
    with serve_metrics(registry, port, "FLEETWATCH_TEST__METRICS_PORT"):
        assert "fleetwatch_test_things_total 3.0" in scrape(port)
    with pytest.raises(urllib.error.URLError, match="refused"):
        scrape(port)
    with serve_metrics(registry, port, "FLEETWATCH_TEST__METRICS_PORT"):  # started again
        assert "fleetwatch_test_things_total 3.0" in scrape(port)


def test_a_port_in_use_stops_the_stage_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with (
            pytest.raises(ConfigurationError, match="FLEETWATCH_SCORE__METRICS_PORT"),
            serve_metrics(CollectorRegistry(), port, "FLEETWATCH_SCORE__METRICS_PORT"),
        ):
            pass


def test_port_0_serves_nothing() -> None:
    with serve_metrics(CollectorRegistry(), 0, "FLEETWATCH_TEST__METRICS_PORT"):
        pass
