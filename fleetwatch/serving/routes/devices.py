from __future__ import annotations

from fastapi import APIRouter, HTTPException

from fleetwatch.serving.deps import StoreDep
from fleetwatch.serving.schemas import AlertPublic, DevicePublic

router = APIRouter(prefix="/devices", tags=["devices"])


@router.get("/{device_id}", response_model=DevicePublic)
def get_device(device_id: str, store: StoreDep) -> DevicePublic:
    """A device's alert count and its latest alert."""
    summary = store.device(device_id)
    if summary is None:
        raise HTTPException(status_code=404, detail=f"no alerts recorded for device {device_id!r}")
    last = AlertPublic.model_validate(summary.last_alert) if summary.last_alert else None
    return DevicePublic(device_id=device_id, alert_count=summary.alert_count, last_alert=last)
