"""Fleet models on ``model.params``: the record of a scope's ``champion``.

``model.params`` is keyed by device id, and by ``fleet:{scope}`` for the champion of a fleet
model: the multivariate model of every device that reports the same metrics (the *scope*,
e.g. ``humidity_temperature``), registered in MLflow. ``fleetwatch models promote`` and
``rollback`` publish the new champion's parameters there, so the scorer follows the champion
without a restart. A device id never contains ``:``, so the two kinds of key cannot collide.

Value: ``{"scope", "model", "model_version", "kind", "schema", "version", "params",
"published_ms"}``; ``version`` rises by one per record of the key (a rollback publishes an
older ``model_version`` under a newer ``version``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

FLEET_KEY_PREFIX = "fleet:"


def fleet_key(scope: str) -> str:
    return f"{FLEET_KEY_PREFIX}{scope}"


def fleet_scope(key: str | None) -> str | None:
    """The scope of a fleet record's key, ``None`` for a device's key."""
    if key is None or not key.startswith(FLEET_KEY_PREFIX):
        return None
    return key[len(FLEET_KEY_PREFIX) :]


def scope_of_metrics(metrics: Iterable[str]) -> str:
    """A device's scope: its metric names, sorted, joined by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(sorted(metrics))) or "none"
