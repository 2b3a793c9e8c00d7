"""Early opens of rules (``alerts.fast``, from the scorer's fast rules path) folded into the
episodes the scorer's rules query sends on ``alerts``.

The real-time query keeps no state, so it sends an early open for every reading its rule holds
on; each names the episode that reading would open. One is kept — stored as the episode's open
and delivered to the webhooks — only when its id is not stored yet and no episode of that rule
on the device is open or ended at or after its reading: the first of an episode arrives before
the scorer's own open, which then finds its event there already (same ``event_id``); the later
ones are dropped. An early open the scorer never confirms (it judged that reading late, or a
repeat, or a reading from before the real-time query started) is withdrawn when the scorer
opens the rule's episode on the device under another id, and the withdrawal delivered too.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from fleetwatch.contracts.alerts import Alert, event_id
from fleetwatch.serving.store.ingest import write_alerts
from fleetwatch.serving.tables import AlertRow

_AT_READING = {"seq", "event_ms", "received_ms", "detected_ms"}
"""The fields of an event that tell the reading it was judged on, and when."""


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


def withdraw_unconfirmed(session: Session, alerts: Iterable[Alert], now: int) -> list[Alert]:
    """The scorer's opens of rule episodes withdraw any other open episode of the same rule on
    the same device: the scorer holds one per rule and device, so another is an early open it
    did not confirm (the real-time query started after the reading the scorer opened on).
    Returns the ``withdraw`` events, stored like any (for the webhooks)."""
    withdrawn: list[Alert] = []
    for alert in alerts:
        if alert.rule_id is None or alert.status != "open":
            continue
        others = select(AlertRow).where(
            AlertRow.device_id == alert.device_id,
            AlertRow.rule_id == alert.rule_id,
            AlertRow.state == "open",
            AlertRow.alert_id != alert.alert_id,
        )
        withdrawn.extend(_withdrawal(row, alert) for row in session.scalars(others).all())
    write_alerts(session, withdrawn, now)
    return withdrawn


def _withdrawal(row: AlertRow, opened: Alert) -> Alert:
    """The ``withdraw`` event of the stored episode ``row``, at the reading the scorer's open
    ``opened`` of the same rule and device was judged on."""
    revision = row.revision + 1
    return Alert.model_validate(row, from_attributes=True).model_copy(
        update={
            "status": "withdraw",
            **opened.model_dump(include=_AT_READING),
            "expected": None,
            "band": None,
            "reason": f"rule {opened.rule_id}: the scorer opened it as {opened.alert_id}",
            "end_ms": opened.event_ms,
            "revision": revision,
            "event_id": event_id(row.alert_id, revision),
        }
    )


def _covered(session: Session, alert: Alert) -> bool:
    """Whether an episode of the rule on the device is open, or ended at or after the reading
    (the early open came after the scorer's resolve: its reading was in that episode)."""
    query = select(AlertRow.alert_id).where(
        AlertRow.device_id == alert.device_id,
        AlertRow.rule_id == alert.rule_id,
        or_(AlertRow.state == "open", AlertRow.end_ms >= alert.event_ms),
    )
    return session.execute(query.limit(1)).first() is not None
