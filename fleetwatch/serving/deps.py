"""Dependencies the routes declare with ``Annotated``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fleetwatch.serving.store import AlertStore


def get_store(request: Request) -> AlertStore:
    store: AlertStore = request.app.state.store
    return store


StoreDep = Annotated[AlertStore, Depends(get_store)]
