"""Fleet models on ``model.params``: the record of a scope's ``champion``.

``model.params`` is keyed by device id, and by ``fleet:{scope}`` for the champion of a fleet
model: what every device that reports the same metrics (the *scope*, e.g.
``humidity_temperature``) pools — its members' tails, and its multivariate model where the
devices have one — registered in MLflow. ``fleetwatch models promote`` and
``rollback`` publish the new champion's parameters there, so the scorer follows the champion
without a restart. A device id never contains ``:`` (:mod:`fleetwatch.contracts.identifiers`),
so the two kinds of key cannot collide. The record's value, and how to write and read it:
:mod:`fleetwatch.contracts.model_params`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleetwatch.contracts.identifiers import FLEET_KEY_PREFIX, after_prefix


def fleet_key(scope: str) -> str:
    return f"{FLEET_KEY_PREFIX}{scope}"


def fleet_scope(key: str | None) -> str | None:
    """The scope of a fleet record's key, ``None`` for a device's key."""
    return after_prefix(key, FLEET_KEY_PREFIX)


def scope_of_metrics(metrics: Iterable[str]) -> str:
    """A device's scope: its metric names, sorted, joined by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(sorted(metrics))) or "none"
