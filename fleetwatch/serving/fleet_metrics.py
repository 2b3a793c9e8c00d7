"""Fleet figures on the API's ``/metrics``, read from its database at each scrape: devices by
status, open alert episodes by severity and detector kind, commands by status, the webhook
outbox. They are what the Fleet dashboard's counts are made of.

Every label comes from a bounded set (the API's statuses, the contract's severities, the
detector kinds the scorer counts by — another kind counts as ``other``); each set is exported
in full, zeros included, so a panel shows 0 rather than nothing. No device id, ever: which
devices alert most is a question for the database itself (the dashboards' SQL).

Every API process serves the same figures (they are the database's, not the process's): a
query over several replicas takes ``max``, not ``sum``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import get_args

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from fleetwatch.contracts.alerts import ALERT_KINDS, SEVERITIES
from fleetwatch.serving.schemas.commands import CommandStatus
from fleetwatch.serving.schemas.devices import DeviceStatus
from fleetwatch.serving.schemas.webhooks import DeliveryStatus
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.tables import AlertRow, CommandRow, DeliveryRow, DeviceRow, DeviceStateRow

logger = logging.getLogger(__name__)

DEVICE_STATUSES: tuple[str, ...] = get_args(DeviceStatus)
COMMAND_STATUSES: tuple[str, ...] = get_args(CommandStatus)
DELIVERY_STATUSES: tuple[str, ...] = get_args(DeliveryStatus)


def _by_status(
    name: str, documentation: str, rows: Iterable[tuple[str | None, int]], statuses: tuple[str, ...]
) -> GaugeMetricFamily:
    """A gauge of ``rows`` (status, count) by status: every one of ``statuses``, 0 when it has
    no row; a row of another status is left out."""
    counts = dict.fromkeys(statuses, 0)
    for status, n in rows:
        if status in counts:
            counts[status] += n
    family = GaugeMetricFamily(name, documentation, labels=["status"])
    for status, n in counts.items():
        family.add_metric([status], n)
    return family


class FleetCollector(Collector):
    """Collected on each scrape of ``/metrics``: four grouped counts over indexed columns, cheap
    enough for every scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        try:
            figures = self._read()
        except SQLAlchemyError as exc:
            logger.warning("fleet figures unavailable: %s", exc)
            return
        yield from figures
        took = GaugeMetricFamily(
            "fleetwatch_api_fleet_query_seconds",
            "How long the fleet figures of this scrape took to read from the database",
        )
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _read(self) -> list[Metric]:
        with self.store.session() as session:
            status = func.coalesce(DeviceStateRow.status, "unknown")
            devices = session.execute(
                select(status, func.count())
                .select_from(DeviceRow)
                .outerjoin(DeviceStateRow, DeviceStateRow.device_id == DeviceRow.device_id)
                .group_by(status)
            ).all()
            alerts = session.execute(
                select(AlertRow.severity, AlertRow.detector, func.count())
                .where(AlertRow.state == "open")
                .group_by(AlertRow.severity, AlertRow.detector)
            ).all()
            commands = session.execute(
                select(CommandRow.status, func.count()).group_by(CommandRow.status)
            ).all()
            outbox = session.execute(
                select(DeliveryRow.status, func.count()).group_by(DeliveryRow.status)
            ).all()
            oldest = session.scalar(
                select(func.min(DeliveryRow.created_ms)).where(DeliveryRow.status == "pending")
            )

        by_status = _by_status(
            "fleetwatch_api_devices",
            "Devices the API knows, by status (unknown: no state from the scorer yet)",
            devices,
            DEVICE_STATUSES,
        )

        open_alerts = GaugeMetricFamily(
            "fleetwatch_api_open_alerts",
            "Open alert episodes, by severity and detector kind",
            labels=["severity", "kind"],
        )
        counted: dict[tuple[str, str], int] = {(s, k): 0 for s in SEVERITIES for k in ALERT_KINDS}
        for severity, detector, n in alerts:
            kind = detector if detector in ALERT_KINDS else "other"
            if (severity, kind) in counted:
                counted[(severity, kind)] += n
        for (severity, kind), n in counted.items():
            open_alerts.add_metric([severity, kind], n)

        by_command = _by_status(
            "fleetwatch_api_commands_by_status",
            "Commands in the database, by status",
            commands,
            COMMAND_STATUSES,
        )

        by_delivery = _by_status(
            "fleetwatch_api_webhook_outbox",
            "Webhook deliveries in the outbox, by status (pending: the backlog)",
            outbox,
            DELIVERY_STATUSES,
        )

        waiting = GaugeMetricFamily(
            "fleetwatch_api_webhook_oldest_pending_seconds",
            "Age of the oldest pending webhook delivery (0: none pending)",
        )
        waiting.add_metric([], 0.0 if oldest is None else max(0.0, (now_ms() - oldest) / 1000))
        return [by_status, open_alerts, by_command, by_delivery, waiting]
