"""The FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from fleetwatch import __version__
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.materialiser import AlertMaterialiser
from fleetwatch.serving.routes import alerts, devices
from fleetwatch.serving.store import AlertStore


def create_app(
    settings: Settings, store: AlertStore | None = None, materialise: bool = True
) -> FastAPI:
    """``materialise=False`` serves the store without consuming Kafka (unit tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.run_path.mkdir(parents=True, exist_ok=True)
        app.state.store = store or AlertStore(settings.database_url)
        materialiser = None
        if materialise:
            materialiser = AlertMaterialiser(
                app.state.store,
                settings.kafka.bootstrap_servers,
                settings.topics.alerts,
                settings.api.consumer_group,
            )
            materialiser.start()
        try:
            yield
        finally:
            if materialiser is not None:
                materialiser.stop()
            app.state.store.close()

    app = FastAPI(title="fleetwatch", version=__version__, lifespan=lifespan)
    app.include_router(alerts.router)
    app.include_router(devices.router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
