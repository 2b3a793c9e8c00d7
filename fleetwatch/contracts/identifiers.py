"""Device ids and metric names: the one rule for each, for every stage that checks one (the
gateway's topic, the wire contracts, the API's paths and bodies).

A device id is 1 to 128 letters, digits, ``_``, ``.`` or ``-``, starting with a letter or a
digit. It never holds ``:``, so that a key with a reserved prefix — :data:`FLEET_KEY_PREFIX`,
the fleet champions' ``fleet:{scope}`` and the quarantine lifts' ``quarantine:{device_id}``
on ``model.params`` — can never be a device's. A metric
name is 1 to 64 letters, digits, ``_``, ``.`` or ``-``, starting with a letter.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

DEVICE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
METRIC_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
FLEET_KEY_PREFIX = "fleet:"
"""The prefix of a fleet champion's key on ``model.params`` (:mod:`fleetwatch.contracts.fleet`);
its ``:`` keeps it apart from every device id."""

QUARANTINE_KEY_PREFIX = "quarantine:"
"""The prefix of a device's quarantine-lift record on ``model.params``
(:mod:`fleetwatch.streaming.scorer.quarantine`)."""

DeviceId = Annotated[str, StringConstraints(pattern=DEVICE_ID_PATTERN)]
MetricName = Annotated[str, StringConstraints(pattern=METRIC_NAME_PATTERN)]

_DEVICE_ID = re.compile(DEVICE_ID_PATTERN)


def is_device_id(text: str) -> bool:
    """Whether the whole of ``text`` is a device id (a trailing newline is not allowed, as
    pydantic's checks of :data:`DeviceId` do not allow it)."""
    return _DEVICE_ID.fullmatch(text) is not None


def after_prefix(key: str | None, prefix: str) -> str | None:
    """What follows ``prefix`` in a ``model.params`` key; ``None`` for no key or another
    prefix's (a device's own key has none)."""
    if key is None or not key.startswith(prefix):
        return None
    return key[len(prefix) :]
