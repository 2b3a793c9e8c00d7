"""``alerts`` → the delivery outbox: one owed delivery per (matching subscription, event).
The Kafka offset is committed after the outbox rows, so an event is never lost; a repeat
finds its delivery owed already (same webhook, same message id) and adds nothing."""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, Message
from sqlalchemy.orm import Session

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.decode import decode_alert
from fleetwatch.serving.kafka import consumer_config, poll, rewind, where
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import webhooks as hooks
from fleetwatch.serving.webhooks.matching import alert_payload, matches, message_id
from fleetwatch.serving.worker import Worker

logger = logging.getLogger(__name__)


def fan_out(store: Store, alerts: list[Alert]) -> int:
    """Owe each alert event to every subscription it matches; returns deliveries owed."""
    with store.session() as session, session.begin():
        return owe(session, alerts, now_ms())


def owe(session: Session, alerts: list[Alert], now: int) -> int:
    """:func:`fan_out` in the caller's transaction."""
    subscriptions = hooks.enabled_hooks(session)
    if not subscriptions or not alerts:
        return 0
    tags = hooks.tags_of(session, sorted({a.device_id for a in alerts}))
    owed = []
    for alert in alerts:
        kind, body = alert_payload(alert)
        for hook in subscriptions:
            if matches(hook, alert, tags.get(alert.device_id, ())):
                owed.append(hooks.delivery_row(hook.webhook_id, message_id(alert), kind, body, now))
    hooks.enqueue(session, owed)
    return len(owed)


class Dispatcher(Worker):
    name = "webhook-dispatch"

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        """Reads ``topics.alerts`` in the consumer group ``api.webhooks.consumer_group``
        (default: the API's group with ``-webhooks``)."""
        super().__init__(store)
        self.metrics = metrics
        api = settings.api
        group = api.webhooks.consumer_group or f"{api.consumer_group}-webhooks"
        self.consumer = Consumer(
            consumer_config(settings.kafka, group, api.consumer_session_timeout_s)
        )
        self.consumer.subscribe([settings.topics.alerts])

    def step(self) -> float:
        messages = poll(self.consumer)
        if not messages:
            return 0
        alerts = [a for m in messages if (a := self._decode(m)) is not None]
        try:
            fan_out(self.store, alerts)
        except Exception:
            rewind(self.consumer, messages)
            raise
        self.consumer.commit(asynchronous=False)
        return 0

    def _decode(self, msg: Message) -> Alert | None:
        try:
            return decode_alert(msg.value())
        except ValueError as exc:
            logger.warning("webhooks skip a record that is not an alert at %s: %s", where(msg), exc)
            return None

    def close(self) -> None:
        self.consumer.close()
