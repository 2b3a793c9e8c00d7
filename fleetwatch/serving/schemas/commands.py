from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from fleetwatch.serving.schemas.common import Body, FromRow

CommandStatus = Literal["pending", "sent", "acked", "failed", "timed_out"]


class CommandCreate(Body):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")] = Field(
        description="set_interval (args interval_ms), reboot, calibrate, or a device's own."
    )
    args: Annotated[dict[str, Any], Field(max_length=32)] = {}
    ttl_s: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] | None = Field(
        None, description="How long to wait for the device's ack; default: api.command_ttl_s."
    )
    alert_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")] | None = Field(
        None, description="The alert this command responds to."
    )


class CommandPublic(FromRow):
    command_id: str
    device_id: str
    name: str
    args: dict[str, Any]
    alert_id: str | None
    issued_by: str | None
    status: CommandStatus
    detail: str
    issued_ms: int
    expires_ms: int
    sent_ms: int | None
    answered_ms: int | None
    ack_status: str | None
    device_ms: int | None
