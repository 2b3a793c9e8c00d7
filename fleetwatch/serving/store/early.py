"""Early opens of rules (``alerts.fast``, :mod:`fleetwatch.streaming.rules.fast`) folded into
the episodes the scorer's rules query sends on ``alerts``.

The real-time query keeps no state, so it sends an early open for every reading its rule holds
on; each names the episode that reading would open. One is kept — stored as the episode's open
and delivered to the webhooks — only when its id is not stored yet and no episode of that rule
on the device is open or ended at or after its reading: the first of an episode arrives before
the scorer's own open, which then finds its event there already (same ``event_id``); the later
ones are dropped. An early open the scorer never confirms (it judged that reading late, or a
repeat) is withdrawn when the scorer opens the rule's episode on the device under another id.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from fleetwatch.contracts.alerts import Alert
from fleetwatch.serving.store.ingest import write_alerts
from fleetwatch.serving.tables import AlertRow


def fold_early(session: Session, early: Iterable[Alert], now: int) -> list[Alert]:
    """Store the early opens that start an episode; returns them (for the webhooks)."""
    kept: list[Alert] = []
    for alert in early:
        if alert.rule_id is None or alert.status != "open":
            continue
        if session.get(AlertRow, alert.alert_id) is not None or _covered(session, alert):
            continue
        write_alerts(session, [alert], now)
        kept.append(alert)
    return kept


def withdraw_unconfirmed(session: Session, alerts: Iterable[Alert], now: int) -> None:
    """The scorer's opens of rule episodes withdraw any other open episode of the same rule on
    the same device: the scorer holds one per rule and device, so another is an early open it
    did not confirm."""
    for alert in alerts:
        if alert.rule_id is None or alert.status != "open":
            continue
        others = and_(
            AlertRow.device_id == alert.device_id,
            AlertRow.rule_id == alert.rule_id,
            AlertRow.state == "open",
            AlertRow.alert_id != alert.alert_id,
            AlertRow.start_ms <= alert.event_ms,
        )
        changes: dict[str, Any] = {
            "status": "withdraw",
            "state": "withdrawn",
            "end_ms": alert.event_ms,
            "updated_ms": now,
        }
        session.execute(update(AlertRow).where(others).values(**changes))


def _covered(session: Session, alert: Alert) -> bool:
    """Whether an episode of the rule on the device is open, or ended at or after the reading
    (the early open came after the scorer's resolve: its reading was in that episode)."""
    query = select(AlertRow.alert_id).where(
        AlertRow.device_id == alert.device_id,
        AlertRow.rule_id == alert.rule_id,
        or_(AlertRow.state == "open", AlertRow.end_ms >= alert.event_ms),
    )
    return session.execute(query.limit(1)).first() is not None
