"""Alert events on the ``alerts`` topic (key = device id).

``alert_id`` is deterministic — the same reading scored by the same detector and parameter
version always yields the same id — so a redelivered or replayed alert is harmless downstream.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

AlertStatus = Literal["open", "update", "resolve"]


class Alert(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    alert_id: str
    device_id: str
    metric: str
    status: AlertStatus = "open"
    detector: str
    params_version: int
    seq: int
    event_ms: int
    received_ms: int
    detected_ms: int
    value: float
    expected: float
    band: float
    score: float
    reason: str


def alert_id(device_id: str, seq: int, metric: str, detector: str, params_version: int) -> str:
    key = f"{device_id}\x1f{seq}\x1f{metric}\x1f{detector}\x1f{params_version}"
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()
