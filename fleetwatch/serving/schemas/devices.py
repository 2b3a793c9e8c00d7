from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fleetwatch.contracts.devices import DeviceCondition, DeviceSession
from fleetwatch.serving.schemas.alerts import AlertPublic
from fleetwatch.serving.schemas.common import Body, DeviceId, FromRow, Label, Page, Tag, text
from fleetwatch.serving.store.ingest import ModelRecord

DeviceStatus = Literal["ok", "alerting", "silent", "quarantined", "unknown"]
Attributes = Annotated[
    dict[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")],
        Annotated[str, text(256)],
    ],
    Field(max_length=64),
]
Tags = Annotated[list[Tag], Field(max_length=32)]


class DeviceCreate(Body):
    device_id: DeviceId
    kind: Label | None = None
    name: Annotated[str, text(256)] | None = None
    attributes: Attributes = {}
    tags: Tags = []


class DeviceUpdate(Body):
    """Fields left out stay as they are; ``tags`` replaces the whole set."""

    kind: Label | None = None
    name: Annotated[str, text(256)] | None = None
    attributes: Attributes | None = None
    tags: Tags | None = None


class DeviceStatePublic(DeviceCondition):
    """A device's latest ``device.state`` record, as the API keeps it."""

    model_config = ConfigDict(from_attributes=True)


class DeviceSummary(BaseModel):
    device_id: str
    kind: str | None
    name: str | None
    attributes: dict[str, str]
    tags: list[str]
    registered: bool = Field(description="Registered by an operator (else seen in its records).")
    status: DeviceStatus
    created_ms: int
    updated_ms: int


class RateLimitedPublic(BaseModel):
    """The gateway's dead letters of the device's messages over its rate
    (``gateway.device_rate``): their latest run, which ends after a minute without one."""

    recently: bool
    """The latest of them is at most a minute old: the device is being rate-limited."""
    dead_letters: int
    """Messages of the run dead-lettered."""
    since_ms: int
    """When the gateway dead-lettered the run's first (wall clock)."""
    last_ms: int
    """… and its latest."""


class DevicePublic(DeviceSummary):
    state: DeviceStatePublic | None
    alert_count: int
    open_alert_count: int
    last_alert: AlertPublic | None
    rate_limited: RateLimitedPublic | None = None
    """``None``: the gateway has not dead-lettered a message of the device for its rate."""


class DevicesPublic(Page):
    data: list[DeviceSummary]


class SessionPublic(DeviceSession):
    """A device's session, as its latest ``device.sessions`` record said."""

    model_config = ConfigDict(from_attributes=True)


class SessionsPublic(Page):
    data: list[SessionPublic]


class ReadingPublic(FromRow):
    seq: int
    event_ms: int
    device_event_ms: int
    received_ms: int
    metrics: dict[str, float]


class ReadingsPublic(BaseModel):
    device_id: str
    data: list[ReadingPublic]
    count: int


class ModelPublic(ModelRecord):
    """A device's current parameters, as its latest ``model.params`` record said."""

    model_config = ConfigDict(from_attributes=True)


class QuarantineLift(BaseModel):
    device_id: str
    lifted_ms: int
    """A quarantine that began at or before this (wall clock) ends."""
