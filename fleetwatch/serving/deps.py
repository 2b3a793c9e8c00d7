"""Dependencies the routes declare with ``Annotated``. They are ``async`` because they do not
block: FastAPI runs a sync dependency in a worker thread, a hop per dependency per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.auth import Authenticator
from fleetwatch.serving.control.publisher import CommandPublisher
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.rules.checker import RuleCheck
from fleetwatch.serving.store import Store
from fleetwatch.serving.webhooks.delivery import Sender
from fleetwatch.serving.webhooks.urls import Resolver


@dataclass
class Services:
    """What the routes use, built once per app (``app.state.services``)."""

    settings: Settings
    store: Store
    metrics: Metrics
    authenticator: Authenticator
    publisher: CommandPublisher
    sender: Sender
    resolver: Resolver
    checker: RuleCheck


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def get_store(request: Request) -> Store:
    services: Services = request.app.state.services
    return services.store


ServicesDep = Annotated[Services, Depends(get_services)]
StoreDep = Annotated[Store, Depends(get_store)]
