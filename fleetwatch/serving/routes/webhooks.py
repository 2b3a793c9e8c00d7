"""Webhook subscriptions (admin): filters, secrets, test events, deliveries, dead letters."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, HTTPException, Response
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session

from fleetwatch.serving.auth import Admin
from fleetwatch.serving.deps import Services, ServicesDep, StoreDep
from fleetwatch.serving.routes.params import AUTH, NOT_FOUND, IdPath, Limit, Offset, found
from fleetwatch.serving.schemas.webhooks import (
    AttemptPublic,
    DeliveriesPublic,
    DeliveryDetail,
    DeliveryPublic,
    DeliveryStatus,
    Redriven,
    RedriveRequest,
    SecretRotate,
    TestEventResult,
    WebhookCreate,
    WebhookPublic,
    WebhooksPublic,
    WebhookUpdate,
    WebhookWithSecret,
)
from fleetwatch.serving.store import now_ms
from fleetwatch.serving.store import webhooks as repo
from fleetwatch.serving.tables import DeliveryRow, WebhookRow
from fleetwatch.serving.webhooks.matching import payload
from fleetwatch.serving.webhooks.urls import UrlRefused, check_url

router = APIRouter(prefix="/webhooks", tags=["webhooks"], responses=AUTH)


def _check(services: Services, url: str) -> None:
    """A refused URL is a 422 on the ``url`` field, like every other validation error."""
    try:
        check_url(url, services.settings.api.webhooks.allow_private, services.resolver)
    except UrlRefused as exc:
        raise RequestValidationError(
            [{"type": "url_refused", "loc": ("body", "url"), "msg": str(exc), "input": url}]
        ) from exc


def _hook(services: Services, webhook_id: str) -> WebhookRow:
    with services.store.session() as session:
        row = session.get(WebhookRow, webhook_id)
    return found(row, f"no webhook {webhook_id!r}")


def _row(session: Session, webhook_id: str) -> WebhookRow:
    """The webhook, within ``session``'s transaction (404 when there is none)."""
    return found(session.get(WebhookRow, webhook_id), f"no webhook {webhook_id!r}")


@router.post("", response_model=WebhookWithSecret, status_code=201)
def create_webhook(body: WebhookCreate, services: ServicesDep, _: Admin) -> WebhookWithSecret:
    """Subscribe a URL to alert events. The response is the only one that shows the secret."""
    _check(services, body.url)
    with services.store.session() as session, session.begin():
        row = repo.create(session, body.model_dump(), now_ms())
    return WebhookWithSecret.model_validate(row)


@router.get("", response_model=WebhooksPublic)
def list_webhooks(store: StoreDep, _: Admin) -> WebhooksPublic:
    with store.session() as session:
        rows = repo.list_hooks(session)
    return WebhooksPublic(data=[WebhookPublic.model_validate(r) for r in rows], count=len(rows))


@router.get("/{webhook_id}", response_model=WebhookPublic, responses=NOT_FOUND)
def get_webhook(webhook_id: IdPath, services: ServicesDep, _: Admin) -> WebhookPublic:
    return WebhookPublic.model_validate(_hook(services, webhook_id))


@router.patch("/{webhook_id}", response_model=WebhookPublic, responses=NOT_FOUND)
def update_webhook(
    webhook_id: IdPath, body: WebhookUpdate, services: ServicesDep, _: Admin
) -> WebhookPublic:
    """Change the URL, filters or description, or disable (``enabled: false``)."""
    fields = body.model_dump(exclude_unset=True)
    if fields.get("url") is not None:
        _check(services, fields["url"])
    with services.store.session() as session, session.begin():
        row = _row(session, webhook_id)
        for name, value in fields.items():
            if value is not None:
                setattr(row, name, value)
        row.updated_ms = now_ms()
    return WebhookPublic.model_validate(row)


@router.delete("/{webhook_id}", status_code=204, responses=NOT_FOUND)
def delete_webhook(webhook_id: IdPath, services: ServicesDep, _: Admin) -> Response:
    """Unsubscribe; its deliveries and their log go too."""
    with services.store.session() as session, session.begin():
        session.delete(_row(session, webhook_id))
    return Response(status_code=204)


@router.post("/{webhook_id}/rotate-secret", response_model=WebhookWithSecret, responses=NOT_FOUND)
def rotate_secret(
    webhook_id: IdPath, services: ServicesDep, _: Admin, body: SecretRotate | None = None
) -> WebhookWithSecret:
    """A new signing secret (given, or generated); shown in this response only."""
    with services.store.session() as session, session.begin():
        row = _row(session, webhook_id)
        row.secret = (body.secret if body else None) or repo.new_secret()
        row.updated_ms = now_ms()
    return WebhookWithSecret.model_validate(row)


@router.post("/{webhook_id}/test", response_model=TestEventResult, responses=NOT_FOUND)
def send_test_event(webhook_id: IdPath, services: ServicesDep, _: Admin) -> TestEventResult:
    """Send one signed ``webhook.test`` event now (one attempt, logged like any delivery)."""
    hook = _hook(services, webhook_id)
    now = now_ms()
    message = f"test-{uuid.uuid4().hex}"
    body = payload("webhook.test", now, {"webhook_id": hook.webhook_id, "message": "test"})
    fields = repo.delivery_row(hook.webhook_id, message, "webhook.test", body, now)
    # attempted right here, once: the delivery worker must not pick it up as well
    fields["next_attempt_ms"] = now + 10**12
    with services.store.session() as session, session.begin():
        row = DeliveryRow(**fields)
        session.add(row)
    outcome = services.sender.attempt(row, retry=False)
    return TestEventResult(
        delivery_id=row.delivery_id,
        message_id=message,
        delivered=outcome.delivered,
        status_code=outcome.status_code,
        error=outcome.error,
    )


@router.get("/{webhook_id}/deliveries", response_model=DeliveriesPublic, responses=NOT_FOUND)
def list_deliveries(
    webhook_id: IdPath,
    services: ServicesDep,
    _: Admin,
    status: DeliveryStatus | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> DeliveriesPublic:
    """The delivery log, newest first; ``status=dead`` is the dead-letter list."""
    _hook(services, webhook_id)
    with services.store.session() as session:
        rows, total = repo.deliveries(session, webhook_id, status, limit, offset)
    return DeliveriesPublic(
        data=[DeliveryPublic.model_validate(r) for r in rows],
        count=total,
        limit=limit,
        offset=offset,
    )


@router.get(
    "/{webhook_id}/deliveries/{delivery_id}", response_model=DeliveryDetail, responses=NOT_FOUND
)
def get_delivery(
    webhook_id: IdPath, delivery_id: int, services: ServicesDep, _: Admin
) -> DeliveryDetail:
    """One delivery with every attempt (time, HTTP status or error, duration)."""
    with services.store.session() as session:
        row = session.get(DeliveryRow, delivery_id) if 0 < delivery_id < 2**62 else None
        if row is None or row.webhook_id != webhook_id:
            raise HTTPException(404, detail=f"no delivery {delivery_id} of webhook {webhook_id!r}")
        log = repo.attempts(session, delivery_id)
    return DeliveryDetail(
        **DeliveryPublic.model_validate(row).model_dump(),
        attempts_log=[AttemptPublic.model_validate(a) for a in log],
    )


@router.post("/{webhook_id}/dead-letters/redrive", response_model=Redriven, responses=NOT_FOUND)
def redrive(
    webhook_id: IdPath, services: ServicesDep, _: Admin, body: RedriveRequest | None = None
) -> Redriven:
    """Put dead deliveries (all, or the ones listed) back in the queue, due now."""
    _hook(services, webhook_id)
    with services.store.session() as session, session.begin():
        count = repo.redrive(session, webhook_id, body.delivery_ids if body else [], now_ms())
    return Redriven(redriven=count)
