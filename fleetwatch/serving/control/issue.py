"""Issuing a command: idempotent per (device, Idempotency-Key). The row is stored first
(``pending``), then published; a publication that fails leaves it pending for the tracker."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from fleetwatch.contracts.commands import Command
from fleetwatch.serving.control.publisher import CommandPublisher, PublishFailed
from fleetwatch.serving.errors import ServingError
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.schemas.commands import CommandCreate
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import commands as rows
from fleetwatch.serving.store.devices import known
from fleetwatch.serving.tables import CommandRow

logger = logging.getLogger(__name__)


class UnknownDevice(ServingError):
    pass


class IdempotencyConflict(ServingError):
    """The key was used before for a different request."""


@dataclass(frozen=True)
class Issued:
    command: CommandRow
    created: bool
    """False when the key was seen before with the same request (a replay)."""


def command_id(device_id: str, idempotency_key: str) -> str:
    digest = hashlib.blake2b(f"{device_id}\x1f{idempotency_key}".encode(), digest_size=10)
    return f"cmd-{digest.hexdigest()}"


def request_hash(body: CommandCreate) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def wire(row: CommandRow) -> Command:
    return Command(
        command_id=row.command_id,
        device_id=row.device_id,
        name=row.name,
        args=row.args,
        issued_ms=row.issued_ms,
    )


@dataclass(frozen=True)
class Issuer:
    """Issues commands: stores each row, publishes it, counts it in ``metrics``; a command
    without its own TTL waits ``default_ttl_s`` for its acknowledgement."""

    store: Store
    publisher: CommandPublisher
    metrics: Metrics
    default_ttl_s: float

    def issue(
        self, device_id: str, body: CommandCreate, idempotency_key: str, issued_by: str
    ) -> Issued:
        digest = request_hash(body)
        now = now_ms()
        row: CommandRow | None = None
        with self.store.session() as session, session.begin():
            if not known(session, device_id):
                raise UnknownDevice(
                    f"no device {device_id!r} (register it, or wait for its records)"
                )
            existing = rows.find(session, device_id, idempotency_key)
            if existing is None:
                ttl_ms = int((body.ttl_s or self.default_ttl_s) * 1000)
                row = rows.add(
                    session,
                    command_id=command_id(device_id, idempotency_key),
                    device_id=device_id,
                    name=body.name,
                    args=body.args,
                    idempotency_key=idempotency_key,
                    request_hash=digest,
                    alert_id=body.alert_id,
                    issued_by=issued_by,
                    issued_ms=now,
                    expires_ms=now + ttl_ms,
                )
        if existing is not None:
            return _replay(existing, digest, idempotency_key)
        if row is None:  # pragma: no cover - for the type checker
            raise ServingError("command row missing")
        self.metrics.commands.labels(outcome="issued").inc()
        send(self.store, self.publisher, row)
        with self.store.session() as session:
            stored = session.get(CommandRow, row.command_id)
        return Issued(stored or row, True)

    def issue_racing(
        self, device_id: str, body: CommandCreate, idempotency_key: str, issued_by: str
    ) -> Issued:
        """:meth:`issue`, where two requests with the same key at once give one command."""
        try:
            return self.issue(device_id, body, idempotency_key, issued_by)
        except IntegrityError:
            with self.store.session() as session:
                existing = rows.find(session, device_id, idempotency_key)
            if existing is None:
                raise
            return _replay(existing, request_hash(body), idempotency_key)


def _replay(existing: CommandRow, digest: str, key: str) -> Issued:
    if existing.request_hash != digest:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was used for a different command ({existing.command_id})"
        )
    return Issued(existing, False)


def send(store: Store, publisher: CommandPublisher, row: CommandRow) -> bool:
    """Publish a pending command; True once Kafka has it (then it is ``sent``)."""
    try:
        publisher.publish(wire(row))
    except PublishFailed as exc:
        logger.warning("command %s to %s not published yet: %s", row.command_id, row.device_id, exc)
        with store.session() as session, session.begin():
            rows.note(session, row.command_id, f"waiting for Kafka: {exc}")
        return False
    with store.session() as session, session.begin():
        rows.mark_sent(session, row.command_id, now_ms())
    return True
