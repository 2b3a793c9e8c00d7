"""Delivering owed webhook messages: signed per Standard Webhooks, retried with backoff,
dead-lettered after ``max_attempts`` or ``max_age_s``. Every attempt is logged."""

from __future__ import annotations

import logging
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook

from fleetwatch.contracts.settings import WebhookSettings
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import webhooks as hooks
from fleetwatch.serving.tables import DeliveryRow, WebhookRow
from fleetwatch.serving.webhooks.backoff import retry_delay_s
from fleetwatch.serving.webhooks.urls import Resolver, UrlRefused, pin, resolve
from fleetwatch.serving.worker import Worker

logger = logging.getLogger(__name__)

USER_AGENT = "fleetwatch-webhooks/1"


def signed_headers(secret: str, message_id: str, at_s: int, body: str) -> dict[str, str]:
    signature = Webhook(secret).sign(message_id, datetime.fromtimestamp(at_s, tz=UTC), body)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(at_s),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    status_code: int | None
    error: str | None


class Sender:
    """One HTTP attempt, and what it does to the delivery."""

    def __init__(
        self,
        store: Store,
        settings: WebhookSettings,
        metrics: Metrics,
        resolver: Resolver = resolve,
        transport: httpx.BaseTransport | None = None,
        seed: int | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.resolver = resolver
        self.client = httpx.Client(
            timeout=settings.timeout_s, follow_redirects=False, transport=transport
        )
        self.rng = random.Random(seed)

    def post(self, hook: WebhookRow, delivery: DeliveryRow) -> Outcome:
        try:
            target = pin(hook.url, self.settings.allow_private, self.resolver)
            headers = signed_headers(
                hook.secret, delivery.message_id, int(time.time()), delivery.payload
            )
            response = self.client.post(
                target.url,
                content=delivery.payload,
                headers={**headers, **target.headers},
                extensions=target.extensions,
            )
        except UrlRefused as exc:
            return Outcome(False, None, f"refused: {exc}")
        except httpx.HTTPError as exc:
            return Outcome(False, None, f"{type(exc).__name__}: {exc}"[:512])
        if 200 <= response.status_code < 300:
            return Outcome(True, response.status_code, None)
        return Outcome(False, response.status_code, f"HTTP {response.status_code}")

    def attempt(self, delivery: DeliveryRow, retry: bool = True) -> Outcome:
        """One attempt; logged, and the delivery moved on. ``retry=False``: a failure is final."""
        with self.store.session() as session:
            hook = session.get(WebhookRow, delivery.webhook_id)
        if hook is None:
            return Outcome(False, None, "the webhook was deleted")
        started = time.perf_counter()
        outcome = self.post(hook, delivery)
        took_ms = (time.perf_counter() - started) * 1000
        now = now_ms()
        attempt = delivery.attempts + 1
        if outcome.delivered:
            state, next_ms = "delivered", now
        elif (
            not retry
            or attempt >= self.settings.max_attempts
            or now - delivery.created_ms >= self.settings.max_age_s * 1000
        ):
            state, next_ms = "dead", now
        else:
            delay = retry_delay_s(
                attempt, self.settings.backoff_base_s, self.settings.backoff_cap_s, self.rng
            )
            state, next_ms = "pending", now + int(delay * 1000)
        with self.store.session() as session, session.begin():
            hooks.record_attempt(
                session,
                delivery,
                now,
                outcome.status_code,
                outcome.error,
                took_ms,
                state,
                next_ms,
            )
        self.metrics.deliveries.labels(
            outcome={"delivered": "delivered", "pending": "failed", "dead": "dead"}[state]
        ).inc()
        if not outcome.delivered:
            logger.info(
                "webhook %s message %s attempt %d: %s -> %s",
                hook.webhook_id,
                delivery.message_id,
                attempt,
                outcome.error,
                state,
            )
        return outcome

    def close(self) -> None:
        self.client.close()


class DeliveryWorker(Worker):
    """Takes due deliveries from the outbox and attempts up to ``concurrency`` at once."""

    name = "webhook-delivery"

    def __init__(self, store: Store, sender: Sender, concurrency: int) -> None:
        super().__init__(store)
        self.sender = sender
        self.concurrency = concurrency
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="webhook-post")
        self.in_flight: dict[int, Future[Outcome]] = {}

    def step(self) -> float:
        self.in_flight = {k: f for k, f in self.in_flight.items() if not f.done()}
        room = self.concurrency - len(self.in_flight)
        if room <= 0:
            return 0.05
        with self.store.session() as session:
            batch = hooks.due(session, now_ms(), set(self.in_flight), room)
        for delivery in batch:
            self.in_flight[delivery.delivery_id] = self.pool.submit(self.sender.attempt, delivery)
        return 0.05 if batch else 0.2

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.sender.close()
