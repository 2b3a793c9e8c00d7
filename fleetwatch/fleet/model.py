"""A scope's fleet model: its parameters, one shape whatever its devices measure::

    {"kind": "fleet", "schema": 1, "trained_from_ms": ..., "trained_to_ms": ...,
     "pca": <the pooled PcaDetector's parameters> | null,
     "level_tails": {metric: tail}, "seasonal_tails": {metric: tail},
     "pca_tails": {"*": tail}}

Two parts, pooled apart (:func:`~fleetwatch.fleet.publish.pooled_by_scope`):

- ``pca``: the devices' multivariate members pooled (:mod:`~fleetwatch.fleet.pca`), where they
  have learned one. A joint model needs two metrics or more, so a scope of single-metric devices
  (one temperature sensor a device) has none: ``null``. The scorer lets it stand in for a
  device's own multivariate member and tell the states the fleet knows;
- the level and seasonal members' tails pooled (:mod:`~fleetwatch.fleet.tails`, under
  ``field_of(kind)``), which every device with a stream has: its young streams' prior; and the
  joint member's tail of its one-reading breaks, one per scope (under
  :data:`~fleetwatch.models.multivariate.JOINT_TAIL`), where the devices have one.

``trained_from_ms`` and ``trained_to_ms`` are the ``pca`` part's (``null`` without one).

The earlier shape, a pooled :class:`~fleetwatch.models.multivariate.PcaDetector`'s own
parameters (``kind`` ``pca``) with the tails beside its fields, reads as the same model
(:func:`parts`). Registered versions and published champions of that shape stay readable, promoted
or rolled back to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetwatch.fleet.tails import POOLED, field_of, tails_of
from fleetwatch.models.errors import FleetModelError, ModelError
from fleetwatch.models.multivariate import JOINT_TAIL, PcaDetector
from fleetwatch.models.tail import StreamTail

KIND = "fleet"
SCHEMA = 1
PCA = "pca"
"""The field of the multivariate part."""

Tails = dict[str, dict[str, StreamTail]]
"""``{member kind: {metric: pooled tail}}``."""


def compose(
    pca: Mapping[str, Any] | None, tails: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """A fleet model's parameters from its parts: the pooled PCA parameters (``None``: none)
    and the pooled tails' fields (:func:`~fleetwatch.fleet.tails.pool_tails`)."""
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "trained_from_ms": None if pca is None else pca.get("trained_from_ms"),
        "trained_to_ms": None if pca is None else pca.get("trained_to_ms"),
        PCA: None if pca is None else dict(pca),
        **{field_of(cls.kind): dict(tails.get(field_of(cls.kind), {})) for cls in POOLED},
    }


def parts(params: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, dict[str, Any]]:
    """The PCA part (``None``: none) and the pooled tails' fields of a fleet model's parameters,
    of this shape or the one before. Raises :class:`FleetModelError` on anything else."""
    fields = {field_of(cls.kind): params.get(field_of(cls.kind), {}) for cls in POOLED}
    kind, schema = params.get("kind"), params.get("schema")
    if kind == PcaDetector.kind:  # the shape before: the PCA detector's own, tails beside
        return {k: v for k, v in params.items() if k not in fields}, fields
    if kind != KIND or schema != SCHEMA:
        raise FleetModelError(
            f"not a fleet model's parameters: kind {kind!r}, schema {schema!r} "
            f"(known: {KIND!r} {SCHEMA}, or {PcaDetector.kind!r})"
        )
    pca = params.get(PCA)
    if pca is not None and not isinstance(pca, Mapping):
        raise FleetModelError(f"the {PCA} part must be an object or null, got {pca!r}")
    return pca, fields


def load(params: Mapping[str, Any]) -> tuple[PcaDetector | None, Tails]:
    """The pooled PCA detector (``None``: none) and the pooled tails by kind. Raises
    :class:`FleetModelError` saying which part is malformed."""
    pca, _ = parts(params)
    try:
        detector = None if pca is None else PcaDetector.from_params(pca)
    except (ModelError, KeyError, TypeError, ValueError) as exc:
        raise FleetModelError(f"bad {PCA} part: {exc}") from exc
    try:
        tails = tails_of(params)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FleetModelError(f"bad pooled tails: {exc}") from exc
    return detector, tails


def metrics_of(detector: PcaDetector | None, tails: Tails) -> list[str]:
    """The metrics a fleet model knows: its PCA part's, else those its tails are pooled of."""
    if detector is not None and detector.metrics:
        return list(detector.metrics)
    return sorted({metric for pooled in tails.values() for metric in pooled} - {JOINT_TAIL})
