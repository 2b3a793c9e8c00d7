from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fleetwatch.contracts.alerts import AlertStatus, Severity
from fleetwatch.serving.schemas.common import Body, DeviceId, FromRow, Page, Tag, text

EventStatus = AlertStatus
Secret = Annotated[str, StringConstraints(pattern=r"^whsec_[A-Za-z0-9+/]{32,88}={0,2}$")]
Url = Annotated[str, StringConstraints(min_length=1, max_length=2048)]


class WebhookFilter(BaseModel):
    """Empty lists match everything; a device matches ``devices`` or any of ``tags``."""

    devices: Annotated[list[DeviceId], Field(max_length=1000)] = []
    tags: Annotated[list[Tag], Field(max_length=32)] = []
    severities: Annotated[list[Severity], Field(max_length=3)] = []
    statuses: Annotated[list[EventStatus], Field(max_length=4)] = []


class WebhookCreate(WebhookFilter):
    model_config = ConfigDict(extra="forbid")

    url: Url
    secret: Secret | None = Field(
        None, description="A Standard Webhooks secret (whsec_ + base64); default: generated."
    )
    description: Annotated[str, text(512)] = ""
    enabled: bool = True


class WebhookUpdate(Body):
    url: Url | None = None
    description: Annotated[str, text(512)] | None = None
    enabled: bool | None = None
    devices: Annotated[list[DeviceId], Field(max_length=1000)] | None = None
    tags: Annotated[list[Tag], Field(max_length=32)] | None = None
    severities: Annotated[list[Severity], Field(max_length=3)] | None = None
    statuses: Annotated[list[EventStatus], Field(max_length=4)] | None = None


class WebhookPublic(FromRow):
    """A subscription; the secret is shown only when it is created or rotated."""

    webhook_id: str
    url: str
    description: str
    enabled: bool
    devices: list[str]
    tags: list[str]
    severities: list[str]
    statuses: list[str]
    created_ms: int
    updated_ms: int


class WebhookWithSecret(WebhookPublic):
    secret: str


class WebhooksPublic(BaseModel):
    data: list[WebhookPublic]
    count: int


DeliveryStatus = Literal["pending", "delivered", "dead"]


class DeliveryPublic(FromRow):
    delivery_id: int
    webhook_id: str
    message_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    created_ms: int
    next_attempt_ms: int
    delivered_ms: int | None
    last_status_code: int | None
    last_error: str | None


class DeliveriesPublic(Page):
    data: list[DeliveryPublic]


class AttemptPublic(FromRow):
    attempt: int
    at_ms: int
    status_code: int | None
    error: str | None
    duration_ms: float


class DeliveryDetail(DeliveryPublic):
    attempts_log: list[AttemptPublic]


class SecretRotate(Body):
    secret: Secret | None = Field(None, description="The new secret; default: generated.")


class RedriveRequest(Body):
    delivery_ids: Annotated[
        list[Annotated[int, Field(ge=1, lt=2**62)]], Field(max_length=1000)
    ] = []
    """Empty: every dead delivery of the webhook."""


class Redriven(BaseModel):
    redriven: int = Field(description="Dead deliveries put back in the queue.")


class TestEventResult(BaseModel):
    delivery_id: int
    message_id: str
    delivered: bool
    status_code: int | None
    error: str | None
