"""The parameter format shared by every detector.

Parameters are a small JSON object, the value of a record on the compacted ``model.params``
topic::

    {"kind": "seasonal", "schema": 1, "version": 7,
     "trained_from_ms": 1763750000000, "trained_to_ms": 1763753600000,
     "hyper": {...constructor arguments...}, "state": {...learned arrays as lists...}}

``version`` increases by one on every update; ``trained_from_ms`` / ``trained_to_ms`` are the
event-time range of all the data learned so far (``None`` before the first update). Floats
survive a JSON round trip exactly (Python writes the shortest repr that reads back to the same
double), so ``from_params(json.loads(json.dumps(p)))`` scores exactly like the original.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from fleetwatch.models.errors import ParamsError

HEADER_FIELDS = ("kind", "schema", "version", "trained_from_ms", "trained_to_ms", "hyper", "state")


def dumps(params: Mapping[str, Any]) -> str:
    """Canonical JSON text (sorted keys, no NaN): equal parameters give equal bytes."""
    return json.dumps(params, sort_keys=True, allow_nan=False, separators=(",", ":"))


_DECODE = msgspec.json.Decoder().decode


def loads(text: str | bytes) -> dict[str, Any]:
    """Parameters from their JSON text, read with msgspec's parser: the same values as the
    standard library's (its floats are correctly rounded too) in a fraction of the time a
    detector's thousands of floats take. Text it refuses (``NaN``, a lone surrogate escaped in
    a name) is read, or refused, by the standard parser."""
    try:
        value = _DECODE(text)
    except msgspec.MsgspecError:
        value = json.loads(text)
    if not isinstance(value, dict):
        raise ParamsError(f"parameters must be a JSON object, got {type(value).__name__}")
    return value


def check_header(params: Mapping[str, Any], kind: str, schema: int) -> None:
    """Refuse parameters of another kind, another schema, or with a missing field."""
    missing = [f for f in HEADER_FIELDS if f not in params]
    if missing:
        raise ParamsError(f"{kind} parameters miss {', '.join(missing)}")
    if params["kind"] != kind:
        raise ParamsError(f"expected {kind!r} parameters, got kind {params['kind']!r}")
    if params["schema"] != schema:
        raise ParamsError(f"{kind} parameters have schema {params['schema']!r}, need {schema}")


def floats(values: npt.ArrayLike) -> Any:
    """An array as (nested) lists of Python floats."""
    return np.asarray(values, dtype=np.float64).tolist()


def ints(values: npt.ArrayLike) -> Any:
    return np.asarray(values, dtype=np.int64).tolist()


def array(state: Mapping[str, Any], name: str, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Read a float array of a known shape from a state dict, with a clear error when it is not."""
    try:
        out = np.asarray(state[name], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise ParamsError(f"state field {name!r} is missing or not numeric") from exc
    if out.size == 0 and 0 in shape:
        return out.reshape(shape)
    if out.shape != shape:
        raise ParamsError(f"state field {name!r} has shape {out.shape}, expected {shape}")
    return out
