"""Devices: the registry, each device's current state, sessions, readings and model.

A registry change that moves the devices of a rule selecting by kind or tag publishes that
rule again (:func:`fleetwatch.serving.rules.publish.republish_for`) before it is answered; if
Kafka does not take it, the change is not made (503)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from sqlalchemy.orm import Session

from fleetwatch.contracts.deadletter import RATE_LIMITED_RUN_S
from fleetwatch.serving.auth import Admin, Reader
from fleetwatch.serving.control.publisher import PublishFailed
from fleetwatch.serving.deps import Services, ServicesDep, StoreDep
from fleetwatch.serving.routes.params import (
    AUTH,
    NOT_FOUND,
    DevicePath,
    FromMs,
    Limit,
    Offset,
    ToMs,
    found,
    json_response,
)
from fleetwatch.serving.rules.publish import (
    RulesBusy,
    RuleTooLarge,
    republish_for,
    rule_transaction,
)
from fleetwatch.serving.schemas.alerts import AlertPublic
from fleetwatch.serving.schemas.devices import (
    DeviceCreate,
    DevicePublic,
    DevicesPublic,
    DeviceStatePublic,
    DeviceStatus,
    DeviceSummary,
    DeviceUpdate,
    ModelPublic,
    QuarantineLift,
    RateLimitedPublic,
    ReadingPublic,
    ReadingsPublic,
    SessionPublic,
    SessionsPublic,
)
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import devices as repo
from fleetwatch.serving.store.rules import registry_terms
from fleetwatch.serving.tables import RateLimitRow

router = APIRouter(prefix="/devices", tags=["devices"], responses=AUTH)

TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


def _summary(view: repo.DeviceView) -> DeviceSummary:
    d = view.device
    return DeviceSummary(
        device_id=d.device_id,
        kind=d.kind,
        name=d.name,
        attributes=d.attributes or {},
        tags=view.tags,
        registered=d.registered,
        status=view.status,
        created_ms=d.created_ms,
        updated_ms=d.updated_ms,
    )


def _not_found(device_id: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"no device {device_id!r}")


def load_device(store: Store, device_id: str) -> DevicePublic:
    with store.session() as session:
        view = repo.get_device(session, device_id)
        if view is None:
            raise _not_found(device_id)
        counts = repo.alert_counts(session, device_id)
        limited = repo.rate_limited(session, device_id)
    state = DeviceStatePublic.model_validate(view.state) if view.state is not None else None
    return DevicePublic(
        **_summary(view).model_dump(),
        state=state,
        alert_count=counts.total,
        open_alert_count=counts.open,
        last_alert=AlertPublic.model_validate(counts.last) if counts.last else None,
        rate_limited=None if limited is None else _rate_limited(limited, now_ms()),
    )


def _rate_limited(row: RateLimitRow, now: int) -> RateLimitedPublic:
    """Being rate-limited: the latest dead letter for the rate within ``RATE_LIMITED_RUN_S``."""
    return RateLimitedPublic(
        recently=now - row.last_ms < RATE_LIMITED_RUN_S * 1000,
        dead_letters=row.dead_letters,
        since_ms=row.since_ms,
        last_ms=row.last_ms,
    )


@router.get("", response_model=DevicesPublic)
def list_devices(
    store: StoreDep,
    _: Reader,
    limit: Limit = 100,
    offset: Offset = 0,
    status: DeviceStatus | None = None,
    kind: Annotated[str | None, Query(pattern=TAG_PATTERN)] = None,
    tag: Annotated[str | None, Query(pattern=TAG_PATTERN)] = None,
) -> DevicesPublic:
    """Devices by id, filtered by status (from their latest state), kind and tag."""
    with store.session() as session:
        views, total = repo.list_devices(session, status, kind, tag, limit, offset)
    return DevicesPublic(data=[_summary(v) for v in views], count=total, limit=limit, offset=offset)


REGISTRY_CHANGE: dict[int | str, dict[str, Any]] = {
    409: {"description": "A rule selecting by kind or tag would outgrow its record"},
    503: {
        "description": "Kafka did not take the rules the change moves, or rule writes held "
        "their lock too long; nothing changed"
    },
}


@contextmanager
def _registry_change(services: Services, device_id: str) -> Iterator[Session]:
    """A transaction changing a device in the registry; the rules it moves are published again
    before it commits."""
    try:
        with rule_transaction(services.store) as session:
            before = registry_terms(session, device_id)
            yield session
            after = registry_terms(session, device_id)
            republish_for(session, services.publisher, before | after)
    except RuleTooLarge as exc:
        raise HTTPException(409, detail=f"the change was not made: {exc}") from exc
    except PublishFailed as exc:
        raise HTTPException(
            503, detail=f"the change was not made: the rules it moves were not published ({exc})"
        ) from exc
    except RulesBusy as exc:
        raise HTTPException(503, detail=f"the change was not made: {exc}") from exc


@router.post(
    "",
    response_model=DevicePublic,
    status_code=status.HTTP_201_CREATED,
    responses={409: {"description": "Registered already"}, 503: REGISTRY_CHANGE[503]},
)
def register_device(body: DeviceCreate, services: ServicesDep, _: Admin) -> DevicePublic:
    """Register a device (a device already seen in its records is claimed)."""
    fields = body.model_dump(exclude={"device_id"})
    with _registry_change(services, body.device_id) as session:
        if not repo.register(session, body.device_id, fields, now_ms()):
            raise HTTPException(409, detail=f"device {body.device_id!r} is registered already")
    return load_device(services.store, body.device_id)


@router.get("/{device_id}", response_model=DevicePublic, responses=NOT_FOUND)
async def get_device(device_id: DevicePath, store: StoreDep, _: Reader) -> Response:
    """A device with its current state, alert counts and latest alert."""
    return json_response(await store.read(load_device, store, device_id))


@router.patch(
    "/{device_id}", response_model=DevicePublic, responses={**NOT_FOUND, **REGISTRY_CHANGE}
)
def update_device(
    device_id: DevicePath, body: DeviceUpdate, services: ServicesDep, _: Admin
) -> DevicePublic:
    """Change kind, name, attributes or tags (``tags`` replaces the set)."""
    with _registry_change(services, device_id) as session:
        if not repo.update_device(
            session, device_id, body.model_dump(exclude_unset=True), now_ms()
        ):
            raise _not_found(device_id)
    return load_device(services.store, device_id)


@router.delete("/{device_id}", status_code=204, responses={**NOT_FOUND, 503: REGISTRY_CHANGE[503]})
def delete_device(device_id: DevicePath, services: ServicesDep, _: Admin) -> Response:
    """Forget a device, its state, sessions, readings and model (alerts and commands stay).
    A device that keeps reporting is discovered again."""
    with _registry_change(services, device_id) as session:
        if not repo.delete_device(session, device_id):
            raise _not_found(device_id)
    return Response(status_code=204)


@router.post(
    "/{device_id}/quarantine/lift",
    response_model=QuarantineLift,
    status_code=status.HTTP_202_ACCEPTED,
    responses={**NOT_FOUND, 503: {"description": "Kafka did not take the lift"}},
)
def lift_quarantine(device_id: DevicePath, services: ServicesDep, _: Admin) -> QuarantineLift:
    """End the device's quarantine (the scorer sets a device aside after repeated failures of
    its batches, for ``score.quarantine_s``): the scorer takes the lift on its next micro-batch
    and scores the device's readings again; ``device.state`` then says so. Lifting a device
    that is not quarantined does nothing."""
    _require_known(services.store, device_id)
    lifted_ms = now_ms()
    try:
        services.publisher.lift_quarantine(device_id, lifted_ms)
    except PublishFailed as exc:
        raise HTTPException(503, detail=str(exc)) from exc
    return QuarantineLift(device_id=device_id, lifted_ms=lifted_ms)


def _require_known(store: Store, device_id: str) -> None:
    with store.session() as session:
        if not repo.known(session, device_id):
            raise _not_found(device_id)


@router.get("/{device_id}/sessions", response_model=SessionsPublic, responses=NOT_FOUND)
def list_sessions(
    device_id: DevicePath, store: StoreDep, _: Reader, limit: Limit = 100, offset: Offset = 0
) -> SessionsPublic:
    """Activity sessions, newest first (an open one has no ``end_reason``)."""
    _require_known(store, device_id)
    with store.session() as session:
        rows, total = repo.sessions(session, device_id, limit, offset)
    return SessionsPublic(
        data=[SessionPublic.model_validate(r) for r in rows],
        count=total,
        limit=limit,
        offset=offset,
    )


@router.get("/{device_id}/telemetry", response_model=ReadingsPublic, responses=NOT_FOUND)
def recent_telemetry(
    device_id: DevicePath,
    store: StoreDep,
    _: Reader,
    from_ms: FromMs = None,
    to_ms: ToMs = None,
    limit: Limit = 100,
) -> ReadingsPublic:
    """The latest readings in [from, to), oldest first; the API keeps a bounded number per
    device (``api.telemetry_per_device``)."""
    _require_known(store, device_id)
    with store.session() as session:
        rows = repo.readings(session, device_id, from_ms, to_ms, limit)
    data = [ReadingPublic.model_validate(r) for r in rows]
    return ReadingsPublic(device_id=device_id, data=data, count=len(data))


@router.get("/{device_id}/model", response_model=ModelPublic, responses=NOT_FOUND)
def current_model(device_id: DevicePath, store: StoreDep, _: Reader) -> ModelPublic:
    """The device's current detector parameters and their version (from ``model.params``)."""
    with store.session() as session:
        row = repo.model(session, device_id)
    return ModelPublic.model_validate(
        found(row, f"no model parameters published for {device_id!r}")
    )
