"""What the API returns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class AlertPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    alert_id: str
    device_id: str
    metric: str
    status: str
    detector: str
    params_version: int
    seq: int
    event_ms: int
    received_ms: int
    detected_ms: int
    stored_ms: int
    value: float
    expected: float
    band: float
    score: float
    reason: str


class AlertsPublic(BaseModel):
    data: list[AlertPublic]
    count: int


class DevicePublic(BaseModel):
    device_id: str
    alert_count: int
    last_alert: AlertPublic | None
