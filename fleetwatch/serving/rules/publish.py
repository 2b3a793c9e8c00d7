"""A rule's version on the ``rules`` topic, published inside the store's transaction that made
it: the record is flushed to Kafka before the transaction commits, and a record Kafka does not
take rolls the transaction back, so the store and the topic move together.

Rule writes, and the registry changes that may move a rule's devices, are made one at a time:
in a process by a lock, across the API's processes on PostgreSQL by a transaction-scoped
advisory lock (SQLite takes one writer at a time). So a rule's records reach the topic in the
order of its versions, and a selector is resolved against a registry no other change is
rewriting at that moment.

Kafka may still hold a record whose confirmation it could not give in time; the key's next
record (the operator's retry) supersedes it on the compacted topic.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from fleetwatch.contracts.rules import RuleRecord, RuleSpec, encode
from fleetwatch.contracts.wire import MAX_RECORD_BYTES
from fleetwatch.serving.control.publisher import CommandPublisher
from fleetwatch.serving.errors import ServingError
from fleetwatch.serving.store import Store
from fleetwatch.serving.store import rules as repo
from fleetwatch.serving.tables import RuleRow

logger = logging.getLogger(__name__)

ADVISORY_LOCK = 0x72_756C_6573
"""PostgreSQL's advisory lock key of rule writes (``"rules"`` in ASCII)."""
LOCK_WAIT_S = 30.0
"""The longest a write waits for the others before it: each holds the lock for a few queries
and one publication (at most its 5 s timeout)."""
_WRITING = threading.Lock()


class RuleTooLarge(ServingError):
    """The rule's record, its resolved devices included, exceeds what a reader of the topic
    accepts."""


class RulesBusy(ServingError):
    """Other rule writes or registry changes held the lock for :data:`LOCK_WAIT_S`."""


@contextmanager
def rule_transaction(store: Store) -> Iterator[Session]:
    """A transaction for a rule write or a registry change, serialised with every other;
    :class:`RulesBusy` after waiting :data:`LOCK_WAIT_S` for them."""
    if not _WRITING.acquire(timeout=LOCK_WAIT_S):
        raise RulesBusy(
            f"other rule writes or registry changes in this API process held the lock for "
            f"{LOCK_WAIT_S:g} s; retry"
        )
    try:
        with store.session() as session, session.begin():
            if session.get_bind().dialect.name == "postgresql":
                session.execute(text(f"SET LOCAL lock_timeout = {round(LOCK_WAIT_S * 1000)}"))
                try:
                    session.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK}
                    )
                except OperationalError as exc:
                    raise RulesBusy(
                        f"another API process held the rules' lock for {LOCK_WAIT_S:g} s "
                        f"(a rule write or registry change); retry"
                    ) from exc
            yield session
    finally:
        _WRITING.release()


def record(row: RuleRow) -> RuleRecord:
    """The record of a rule in force, as the ``rules`` topic carries it."""
    return RuleRecord.model_validate(
        {
            **(row.spec or {}),
            "version": row.version,
            "updated_ms": row.updated_ms,
            "devices": row.devices,
        }
    )


def publish(publisher: CommandPublisher, row: RuleRow) -> None:
    """The rule's current record (a tombstone once deleted), durable in Kafka on return."""
    value = None if row.deleted else encode(record(row))
    if value is not None and len(value) > MAX_RECORD_BYTES:
        selected = len(row.devices or [])
        raise RuleTooLarge(
            f"the rule {row.rule_id!r} selects {selected} devices: its record would be "
            f"{len(value):,} bytes, over the {MAX_RECORD_BYTES:,} a record may have; "
            "select fewer devices (or all of them, with an empty selector)"
        )
    publisher.publish_rule(row.rule_id, value)


def republish_for(
    session: Session, publisher: CommandPublisher, terms: repo.RegistryTerms
) -> list[str]:
    """After a registry change that touched these kinds and tags (the device's, before and
    after): each rule in force naming any of them is resolved again, and where its devices
    changed it is published again, at the same version. Its ids, in order."""
    changed: list[str] = []
    if not terms:
        return changed
    for row in repo.naming(session, terms):
        devices = repo.resolve(session, RuleSpec.model_validate(row.spec).select)
        if devices != row.devices:
            row.devices = devices
            publish(publisher, row)
            changed.append(row.rule_id)
    if changed:
        session.flush()
        logger.info("rules published again for their devices: %s", ", ".join(changed))
    return changed
