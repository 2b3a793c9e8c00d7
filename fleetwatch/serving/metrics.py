"""Prometheus metrics of the API process, on ``/metrics``: request latency by route,
materialiser lag, webhook deliveries by outcome, command outcomes, and the fleet's figures from
the database (:mod:`fleetwatch.serving.fleet_metrics`). One registry per app."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleetwatch.serving.fleet_metrics import FleetCollector
from fleetwatch.serving.store import Store

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
COMMAND_OUTCOMES = ("issued", "sent", "acked", "failed", "timed_out", "late_ack")
DELIVERY_OUTCOMES = ("delivered", "failed", "dead")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "fleetwatch_api_request_seconds",
            "HTTP request latency by route template, method and status class",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.lag_records = Gauge(
            "fleetwatch_api_materialiser_lag_records",
            "Records not yet materialised, per topic (high watermark - position)",
            ["topic"],
            registry=self.registry,
        )
        self.lag_seconds = Gauge(
            "fleetwatch_api_materialiser_lag_seconds",
            "Now minus the Kafka timestamp of the latest record materialised, per topic",
            ["topic"],
            registry=self.registry,
        )
        self.materialised = Counter(
            "fleetwatch_api_materialised_records",
            "Records materialised, per topic",
            ["topic"],
            registry=self.registry,
        )
        self.skipped = Counter(
            "fleetwatch_api_skipped_records",
            "Records that did not follow their contract (logged and skipped), per topic",
            ["topic"],
            registry=self.registry,
        )
        self.deliveries = Counter(
            "fleetwatch_api_webhook_deliveries",
            "Webhook delivery attempts by outcome (delivered, failed, dead)",
            ["outcome"],
            registry=self.registry,
        )
        self.commands = Counter(
            "fleetwatch_api_commands",
            "Commands by outcome (issued, sent, acked, failed, timed_out, late_ack)",
            ["outcome"],
            registry=self.registry,
        )
        # Every outcome exists from the start at 0: a counter that first appears at 1 shows no
        # increase in rate() or increase(), so the first command or delivery would be lost.
        for outcome in COMMAND_OUTCOMES:
            self.commands.labels(outcome=outcome)
        for outcome in DELIVERY_OUTCOMES:
            self.deliveries.labels(outcome=outcome)
        self._fleet: FleetCollector | None = None

    def watch_fleet(self, store: Store) -> None:
        """Serve the fleet's figures read from ``store`` (until :meth:`unwatch_fleet`)."""
        self.unwatch_fleet()
        self._fleet = FleetCollector(store)
        self.registry.register(self._fleet)

    def unwatch_fleet(self) -> None:
        if self._fleet is not None:
            self.registry.unregister(self._fleet)
            self._fleet = None


class LatencyMiddleware:
    """Times every request under its route template (``/devices/{device_id}``), so the label
    set stays bounded whatever paths are asked for."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(
                route=template, method=scope.get("method", ""), status=f"{status[0] // 100}xx"
            ).observe(time.perf_counter() - started)
