"""One device's training step, pure: previous parameters + a mini-batch → new parameters.

The trainer's Spark job (:mod:`fleetwatch.streaming.train`) is glue around these functions; the
tests call them directly. Parameters travel as canonical JSON text (:func:`params.dumps`), the
form they have in the job's state store and, wrapped by :func:`publication`, on ``model.params``.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from fleetwatch.models import params
from fleetwatch.models.errors import ParamsError
from fleetwatch.models.registry import default_detector, load_params

FRAME_COLUMNS = ("event_ms", "metric", "value")
"""What :func:`learn_device` reads of a frame (long form, one row per reading and metric)."""


def learn_device(previous: str | None, frame: pd.DataFrame) -> str | None:
    """Learn one mini-batch of one device's readings incrementally.

    ``previous`` is the device's parameters as JSON (``None`` for a device never seen: it starts
    from :func:`default_detector`). Returns the new parameters as canonical JSON, or ``None``
    when nothing changed (no rows to learn). The detector's ``version`` goes up by one per batch
    learned; anomalies are kept out of the statistics by the detector's own gate (``exclude``
    left to ``None``; see :mod:`fleetwatch.streaming.train`).
    """
    if frame.empty:
        return None
    detector = default_detector() if previous is None else load_params(params.loads(previous))
    detector.learn(frame.loc[:, list(FRAME_COLUMNS)])
    updated = params.dumps(detector.to_params())
    return None if updated == previous else updated


def publication(device_id: str, params_json: str, published_ms: int) -> str:
    """The value of a ``model.params`` record: the parameters with their header lifted out.

    ``{"device_id", "kind", "schema", "version", "trained_from_ms", "trained_to_ms",
    "params": <to_params()>, "published_ms"}``; the record key is ``device_id``.
    """
    p = params.loads(params_json)
    record: dict[str, Any] = {
        "device_id": device_id,
        "kind": p["kind"],
        "schema": p["schema"],
        "version": p["version"],
        "trained_from_ms": p["trained_from_ms"],
        "trained_to_ms": p["trained_to_ms"],
        "params": p,
        "published_ms": published_ms,
    }
    return json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":"))


def params_of(record_value: str | bytes) -> dict[str, Any]:
    """The detector parameters inside a ``model.params`` record value (see :func:`publication`)."""
    inner = params.loads(record_value).get("params")
    if not isinstance(inner, dict):
        raise ParamsError("a model.params record value without a 'params' object")
    return inner
