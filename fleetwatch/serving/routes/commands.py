"""Commands to devices: issue (idempotent), follow to ack, failure or timeout."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Response
from sqlalchemy import ColumnElement

from fleetwatch.serving.auth import Operator, Reader
from fleetwatch.serving.control.issue import IdempotencyConflict, Issuer, UnknownDevice
from fleetwatch.serving.deps import ServicesDep, StoreDep
from fleetwatch.serving.routes.params import (
    AUTH,
    NOT_FOUND,
    DevicePath,
    IdPath,
    Limit,
    Offset,
    found,
)
from fleetwatch.serving.schemas.commands import CommandCreate, CommandPublic, CommandStatus
from fleetwatch.serving.schemas.common import DEVICE_ID_PATTERN, Page
from fleetwatch.serving.store.pages import page
from fleetwatch.serving.tables import CommandRow

router = APIRouter(tags=["commands"], responses=AUTH)

IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        pattern=r"^[A-Za-z0-9_.:-]{1,128}$",
        description="Repeating a request with the same key gives the same command, sent once.",
    ),
]


class CommandsPublic(Page):
    data: list[CommandPublic]


@router.post(
    "/devices/{device_id}/commands",
    response_model=CommandPublic,
    status_code=201,
    responses={
        200: {"model": CommandPublic, "description": "A repeat of an earlier request"},
        404: {"description": "Unknown device"},
        409: {"description": "The Idempotency-Key was used for another command"},
    },
)
def send_command(
    device_id: DevicePath,
    body: CommandCreate,
    idempotency_key: IdempotencyKey,
    services: ServicesDep,
    who: Operator,
    response: Response,
) -> CommandPublic:
    """Send a command: stored ``pending``, ``sent`` once Kafka has it, then ``acked`` or
    ``failed`` by the device's answer, or ``timed_out`` after ``ttl_s`` without one (a device
    that is offline gets it when it is back, within the TTL)."""
    try:
        issuer = Issuer(
            services.store,
            services.publisher,
            services.metrics,
            services.settings.api.command_ttl_s,
        )
        issued = issuer.issue_racing(device_id, body, idempotency_key, who.key_id)
    except UnknownDevice as exc:
        raise HTTPException(404, detail=str(exc)) from exc
    except IdempotencyConflict as exc:
        raise HTTPException(409, detail=str(exc)) from exc
    if not issued.created:
        response.status_code = 200
    return CommandPublic.model_validate(issued.command)


@router.get("/commands/{command_id}", response_model=CommandPublic, responses=NOT_FOUND)
def get_command(command_id: IdPath, store: StoreDep, _: Reader) -> CommandPublic:
    with store.session() as session:
        row = session.get(CommandRow, command_id)
    return CommandPublic.model_validate(found(row, f"no command {command_id!r}"))


@router.get("/commands", response_model=CommandsPublic)
def list_commands(
    store: StoreDep,
    _: Reader,
    device: Annotated[str | None, Query(pattern=DEVICE_ID_PATTERN)] = None,
    status: CommandStatus | None = None,
    alert_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> CommandsPublic:
    """Commands, newest first."""
    where: list[ColumnElement[bool]] = []
    if device is not None:
        where.append(CommandRow.device_id == device)
    if status is not None:
        where.append(CommandRow.status == status)
    if alert_id is not None:
        where.append(CommandRow.alert_id == alert_id)
    with store.session() as session:
        newest_first = [CommandRow.issued_ms.desc(), CommandRow.command_id]
        rows, total = page(session, CommandRow, where, newest_first, limit, offset)
    return CommandsPublic(
        data=[CommandPublic.model_validate(r) for r in rows],
        count=total,
        limit=limit,
        offset=offset,
    )
