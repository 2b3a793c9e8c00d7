from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fleetwatch.serving.schemas.common import Body, FromRow, Page, text

AlertState = Literal["open", "resolved", "withdrawn"]


class AlertPublic(FromRow):
    """One alert episode, with the fields of its latest event."""

    alert_id: str
    device_id: str
    metric: str
    detector: str
    severity: str
    status: str = Field(description="The latest event: open, update, resolve or withdraw.")
    state: AlertState
    revision: int
    start_ms: int
    end_ms: int | None
    params_version: int
    seq: int
    event_ms: int
    received_ms: int
    detected_ms: int
    stored_ms: int
    updated_ms: int
    value: float | None = Field(description="None when a rule's episode ended with the rule.")
    expected: float | None = Field(description="None for a rule's episode.")
    band: float | None = Field(description="None for a rule's episode.")
    score: float
    reason: str
    rule_id: str | None = Field(
        None, description="The operator's rule that raised it (detector `rule`)."
    )
    rule_version: int | None = Field(
        None, description="The version of that rule the latest event was judged by."
    )
    acknowledged_by: str | None
    acknowledged_ms: int | None
    ack_comment: str | None


class AlertEventPublic(FromRow):
    event_id: str
    revision: int
    status: str
    severity: str
    seq: int
    event_ms: int
    detected_ms: int
    stored_ms: int
    value: float | None
    score: float
    reason: str


class AlertDetail(AlertPublic):
    events: list[AlertEventPublic]
    commands: list[str] = Field(description="Ids of the commands sent in response.")


class AlertsPublic(Page):
    data: list[AlertPublic]


class AlertAck(Body):
    by: Annotated[str, text(128)] | None = Field(
        None, description="Who acknowledges; default: the API key's name."
    )
    comment: Annotated[str, text(1024)] = ""
