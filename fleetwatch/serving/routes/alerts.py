from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from fleetwatch.serving.deps import StoreDep
from fleetwatch.serving.schemas import AlertPublic, AlertsPublic

router = APIRouter(prefix="/alerts", tags=["alerts"])


@router.get("", response_model=AlertsPublic)
def list_alerts(
    store: StoreDep,
    device_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> AlertsPublic:
    """Alerts, newest event time first."""
    rows = store.alerts(device_id=device_id, limit=limit, offset=offset)
    data = [AlertPublic.model_validate(r) for r in rows]
    return AlertsPublic(data=data, count=len(data))
