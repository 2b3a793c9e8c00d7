"""The FastAPI application: routers, auth, metrics, the background workers it runs (Kafka
materialiser, command tracker, webhook dispatcher and delivery), and the rule checker's child
process once a rule is written."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from fleetwatch import __version__
from fleetwatch.contracts.settings import Settings
from fleetwatch.heap import settle
from fleetwatch.serving.auth import Authenticator
from fleetwatch.serving.control.publisher import CommandPublisher, KafkaCommandPublisher
from fleetwatch.serving.control.tracker import CommandTracker
from fleetwatch.serving.deps import Services
from fleetwatch.serving.limits import BodyLimitMiddleware
from fleetwatch.serving.materialiser import Materialiser
from fleetwatch.serving.metrics import LatencyMiddleware, Metrics
from fleetwatch.serving.routes import alerts, commands, devices, health, keys, rules, webhooks
from fleetwatch.serving.rules.checker import RuleCheck, RuleChecker
from fleetwatch.serving.store import Store
from fleetwatch.serving.webhooks.delivery import DeliveryWorker, Sender
from fleetwatch.serving.webhooks.dispatch import Dispatcher
from fleetwatch.serving.webhooks.urls import Resolver, resolve
from fleetwatch.serving.worker import Worker

logger = logging.getLogger(__name__)

DESCRIPTION = """Devices (registry, current state, sessions, recent readings, model), alert
episodes (filter, acknowledge), commands to devices, operators' rules, alert webhooks, API keys.

Authenticate with `Authorization: Bearer fwk_…` or `X-API-Key: fwk_…`. Scopes: `read`;
`operate` (commands, acknowledging alerts; includes read); `admin` (keys, webhooks, device
registry, rules; includes operate). `/healthz`, `/readyz` and `/metrics` are open."""


def create_app(
    settings: Settings,
    store: Store | None = None,
    materialise: bool = True,
    publisher: CommandPublisher | None = None,
    workers: bool | None = None,
    resolver: Resolver = resolve,
    transport: httpx.BaseTransport | None = None,
    checker: RuleCheck | None = None,
) -> FastAPI:
    """``materialise=False`` consumes no Kafka (unit tests); ``workers`` (default: as
    ``materialise``) runs the command tracker and webhook delivery; ``checker`` (default: Spark
    in a child process, started by the first rule written) checks rules."""
    run_workers = materialise if workers is None else workers
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.run_path.mkdir(parents=True, exist_ok=True)
        db = store or Store(settings.database_url)
        kafka = publisher or KafkaCommandPublisher(
            settings.kafka,
            settings.topics.device_commands,
            settings.topics.quarantine_lifts,
            settings.topics.rules,
        )
        rule_checker = checker or RuleChecker(settings.run_path / "rule-checker.log")
        hooks = settings.api.webhooks
        sender = Sender(db, hooks, metrics, resolver, transport)
        app.state.services = Services(
            settings=settings,
            store=db,
            metrics=metrics,
            authenticator=Authenticator(db, settings.api.anonymous_read, settings.api.key_cache_s),
            publisher=kafka,
            sender=sender,
            resolver=resolver,
            checker=rule_checker,
        )
        running: list[Worker] = []
        if materialise:
            running.append(Materialiser(db, settings, metrics))
            if hooks.enabled:
                running.append(Dispatcher(db, settings, metrics))
        if run_workers:
            running.append(CommandTracker(db, kafka, metrics))
            if hooks.enabled:
                delivering = Sender(db, hooks, metrics, resolver, transport)
                running.append(DeliveryWorker(db, delivering, hooks.concurrency))
        for worker in running:
            worker.start()
        metrics.watch_fleet(db)
        settle()
        try:
            yield
        finally:
            metrics.unwatch_fleet()
            for worker in reversed(running):
                worker.stop()
            sender.close()
            if checker is None:
                rule_checker.close()
            if publisher is None:
                kafka.close()
            if store is None:
                db.close()

    app = FastAPI(
        title="fleetwatch", version=__version__, description=DESCRIPTION, lifespan=lifespan
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.api.max_body_bytes)
    app.add_middleware(LatencyMiddleware, metrics=metrics)  # outermost: 413s are timed too
    for router in (health, devices, alerts, commands, rules, webhooks, keys):
        app.include_router(router.router)

    @app.exception_handler(OperationalError)
    async def database_unavailable(_request: Request, exc: OperationalError) -> JSONResponse:
        logger.warning("database unavailable: %s", exc)
        return JSONResponse({"detail": "the database is unavailable; retry"}, status_code=503)

    return app
