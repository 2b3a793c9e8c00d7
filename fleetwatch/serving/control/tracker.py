"""Follows open commands: re-publishes the ones Kafka did not take, times out the ones whose
TTL passed without an acknowledgement."""

from __future__ import annotations

import logging

from fleetwatch.serving.control.issue import send
from fleetwatch.serving.control.publisher import CommandPublisher
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import commands as rows
from fleetwatch.serving.worker import Worker

logger = logging.getLogger(__name__)

RESEND_AFTER_MS = 2_000


class CommandTracker(Worker):
    name = "command-tracker"

    def __init__(
        self, store: Store, publisher: CommandPublisher, metrics: Metrics, every_s: float = 0.5
    ) -> None:
        super().__init__(store)
        self.publisher = publisher
        self.metrics = metrics
        self.every_s = every_s

    def step(self) -> float:
        now = now_ms()
        with self.store.session() as session, session.begin():
            expired = rows.expire(session, now)
        if expired:
            logger.info("%d command(s) timed out without an acknowledgement", expired)
            self.metrics.commands.labels(outcome="timed_out").inc(expired)
        with self.store.session() as session:
            waiting = rows.unsent(session, now - RESEND_AFTER_MS)
        for row in waiting:
            if self.stopping:
                break
            if send(self.store, self.publisher, row):
                self.metrics.commands.labels(outcome="sent").inc()
        return self.every_s
