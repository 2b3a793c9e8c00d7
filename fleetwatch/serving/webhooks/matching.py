"""Which subscriptions an alert event goes to, and what they receive."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from fleetwatch.contracts.alerts import Alert, event_id
from fleetwatch.serving.tables import WebhookRow


def matches(hook: WebhookRow, alert: Alert, device_tags: Iterable[str]) -> bool:
    if not hook.enabled:
        return False
    if hook.devices or hook.tags:
        by_device = alert.device_id in hook.devices
        by_tag = bool(set(hook.tags) & set(device_tags))
        if not (by_device or by_tag):
            return False
    if hook.severities and alert.severity not in hook.severities:
        return False
    return not (hook.statuses and alert.status not in hook.statuses)


def message_id(alert: Alert) -> str:
    """The ``webhook-id``: the event's id, the same on every retry, for de-duplication."""
    return alert.event_id or event_id(alert.alert_id, alert.revision)


def payload(event_type: str, when_ms: int, data: dict[str, Any]) -> str:
    """The Standard Webhooks body: ``{"type", "timestamp", "data"}``."""
    timestamp = datetime.fromtimestamp(when_ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": event_type, "timestamp": timestamp, "data": data})


def alert_payload(alert: Alert) -> tuple[str, str]:
    """(event type, body) of an alert event."""
    kind = f"alert.{alert.status}"
    data = alert.model_dump() | {"event_id": message_id(alert)}
    return kind, payload(kind, alert.detected_ms, data)
