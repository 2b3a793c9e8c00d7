"""Alert events on the ``alerts`` topic (key = device id).

An alert is an *episode*: one device, one metric, one detector kind, from the event time it
opened. Its life is a sequence of events with the same ``alert_id``::

    open → update* → resolve          (a normal episode)
    open → update* → withdraw         (late data showed it was never an anomaly)

``alert_id`` is deterministic — a hash of device, metric, kind and the event time the episode
started — so a restart or a replay re-emits the same ids, never a second alert for the same
episode. ``event_id`` (``alert_id`` + ``revision``) identifies one event of an episode, for
consumers that de-duplicate events rather than episodes.
"""

from __future__ import annotations

import hashlib
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from fleetwatch.contracts.telemetry import Seq

AlertStatus = Literal["open", "update", "resolve", "withdraw"]
Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
RULE_KIND = "rule"
"""The ``detector`` of an alert raised by an operator's rule (:mod:`fleetwatch.contracts.rules`)."""
ALERT_KINDS: tuple[str, ...] = (
    "cusum",
    "flatline",
    "level",
    "pca",
    "seasonal",
    "fixed-baseline",
    "dropout",
    "state",
    RULE_KIND,
    "other",
)
"""The detector kinds an alert can name (``detector``): each registered detector's but the
combiner's, the fixed baseline, ``dropout`` (a gap between readings), ``state`` (a
device-wide move) and ``rule`` (an operator's rule, :mod:`fleetwatch.contracts.rules`).
Counts and metrics label alerts by these; another kind (a detector added later) counts as
``other`` until it is added here (a unit test holds the list to the registry)."""


class Alert(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    alert_id: str
    device_id: str
    metric: str
    status: AlertStatus = "open"
    detector: str
    """The detector kind that raised it (``seasonal``, ``change``, ``flatline``, …)."""
    params_version: int
    """The version of the device's parameters the score was computed with."""
    seq: Seq
    """The device sequence number of the reading that caused this event."""
    event_ms: int
    """Event time of the reading that caused this event."""
    received_ms: int
    detected_ms: int
    value: float | None
    """The reading's value (``None`` on a resolve caused by the device going silent)."""
    expected: float | None
    band: float | None
    score: float
    reason: str
    severity: Severity = "warning"
    start_ms: int | None = None
    """Event time the episode started (the first anomalous reading)."""
    end_ms: int | None = None
    """Event time the episode ended; set on ``resolve`` and ``withdraw``."""
    revision: int = 0
    """0 for ``open``, then +1 for each later event of the same episode."""
    event_id: str = ""
    model: str | None = None
    """The registered fleet model (``name/version``, the scope's ``champion``) that scored the
    event, when it was not the device's own parameters (see ``score.fleet_model``)."""
    rule_id: str | None = None
    """The operator's rule that raised it (``detector`` is ``rule``)."""
    rule_version: int | None = None
    """The version of that rule the event was judged by."""


def alert_id(device_id: str, metric: str, detector: str, start_ms: int) -> str:
    """The id of the episode of ``detector`` on ``device_id``/``metric`` from ``start_ms``."""
    key = f"{device_id}\x1f{metric}\x1f{detector}\x1f{start_ms}"
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def event_id(alert: str, revision: int) -> str:
    return f"{alert}.{revision}"
