"""Alert episodes: list and filter, one with its events and commands, acknowledge."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.concurrency import run_in_threadpool

from fleetwatch.contracts.alerts import Severity
from fleetwatch.contracts.rules import RULE_ID_PATTERN
from fleetwatch.serving.auth import Operator, Reader
from fleetwatch.serving.deps import StoreDep
from fleetwatch.serving.routes.params import (
    AUTH,
    NOT_FOUND,
    FromMs,
    IdPath,
    Limit,
    Offset,
    ToMs,
    found,
    json_response,
)
from fleetwatch.serving.schemas.alerts import (
    AlertAck,
    AlertDetail,
    AlertEventPublic,
    AlertPublic,
    AlertsPublic,
    AlertState,
)
from fleetwatch.serving.schemas.common import DEVICE_ID_PATTERN
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import alerts as repo

router = APIRouter(prefix="/alerts", tags=["alerts"], responses=AUTH)

DeviceQuery = Annotated[str | None, Query(pattern=DEVICE_ID_PATTERN, description="A device id")]


@router.get("", response_model=AlertsPublic)
async def list_alerts(
    store: StoreDep,
    _: Reader,
    device: DeviceQuery = None,
    device_id: Annotated[
        str | None, Query(pattern=DEVICE_ID_PATTERN, deprecated=True, description="= device")
    ] = None,
    rule_id: Annotated[
        str | None, Query(pattern=RULE_ID_PATTERN, description="Raised by this rule")
    ] = None,
    severity: Severity | None = None,
    state: AlertState | None = None,
    acknowledged: bool | None = None,
    from_ms: FromMs = None,
    to_ms: ToMs = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Response:
    """Alert episodes, newest start first; ``from``/``to`` bound the episode's start time."""
    where = repo.AlertFilter(
        device_id=device or device_id,
        rule_id=rule_id,
        severity=severity,
        state=state,
        acknowledged=acknowledged,
        from_ms=from_ms,
        to_ms=to_ms,
    )
    if where.device_id is not None:  # one device's episodes, by index: a short read
        rows, total = await store.read(_alerts, store, where, limit, offset)
    else:  # a count over the whole table may take a while: not on the event loop
        rows, total = await run_in_threadpool(_alerts, store, where, limit, offset)
    body = AlertsPublic(
        data=[AlertPublic.model_validate(r) for r in rows], count=total, limit=limit, offset=offset
    )
    return json_response(body)


def _alerts(
    store: Store, where: repo.AlertFilter, limit: int, offset: int
) -> tuple[list[dict[str, Any]], int]:
    with store.session() as session:
        return repo.list_alerts(session, where, limit, offset)


def _detail(store: Store, alert_id: str) -> AlertDetail:
    with store.session() as session:
        view = repo.get_alert(session, alert_id)
    shown = found(view, f"no alert {alert_id!r}")
    return AlertDetail(
        **AlertPublic.model_validate(shown.alert).model_dump(),
        events=[AlertEventPublic.model_validate(e) for e in shown.events],
        commands=shown.commands,
    )


@router.get("/{alert_id}", response_model=AlertDetail, responses=NOT_FOUND)
def get_alert(alert_id: IdPath, store: StoreDep, _: Reader) -> AlertDetail:
    """An episode with every event so far and the commands sent in response."""
    return _detail(store, alert_id)


@router.post("/{alert_id}/ack", response_model=AlertDetail, responses=NOT_FOUND)
def acknowledge(alert_id: IdPath, body: AlertAck, store: StoreDep, who: Operator) -> AlertDetail:
    """Acknowledge an episode: who (default: the key's name), when (now) and a comment.
    Acknowledging again replaces the previous acknowledgement."""
    with store.session() as session, session.begin():
        if not repo.acknowledge(session, alert_id, body.by or who.name, body.comment, now_ms()):
            raise HTTPException(404, detail=f"no alert {alert_id!r}")
    return _detail(store, alert_id)
