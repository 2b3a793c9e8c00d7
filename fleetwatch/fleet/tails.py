"""The fleet's tails of the level, seasonal and joint members' statistics: what a device's
stream is held to while its own history cannot set its threshold.

A stream's threshold is where its own excursion peaks pass at the budget's rate
(:class:`~fleetwatch.models.tail.StreamTail`). Until ``MIN_PEAKS`` of them were seen it is the
body's quantile, extrapolated exponentially from a few hundred readings, and a young device's
average strays past a threshold set by minutes of history. Devices of one kind share a sensor's
behaviour, so the others' excursions tell a young one how far its average strays in a day. The
seasonal member's ``|z|`` is the same case.

Pooling, per member kind and metric of a scope: every device whose tail has ``POOLED_FROM``
values adds its body's histogram, the readings its excursions were taken from, and its
excursion peaks *below its own threshold in force* (a peak past it was an alert, a fault as
often as not: one device's fault must not teach the fleet that faults are normal). The sum is one
:class:`StreamTail` — the excursions of one stream that read as long as all of them — with the
devices' median interval between readings.

No one device can skew the sum, as none can the pooled moments (:mod:`~fleetwatch.fleet.pca`):
each device's body, and its peaks with the readings they came from, weigh at most the median
device's (a device that reads a hundred times as often counts as one), and the
:func:`~fleetwatch.fleet.pca.left_out` widest tails — by their body's mean above its
``1 - P_BODY`` quantile, the body's expected shortfall — are left out: a noisy device's wide
tail would otherwise lift every young device's threshold in its scope.

Young tails are pooled too: a fleet started together has no device of ``MIN_HISTORY`` in its
first minutes, yet a hundred devices' first minute of deviations is a history of thousands (see
:data:`POOLED_FROM`).

A level stream takes the higher of its own threshold and the pooled tail's at any age, once
the pool knows its excursions (a machine's own few burst peaks fit a light tail); while neither
its own tail nor the pool :meth:`knows_excursions
<fleetwatch.models.tail.StreamTail.knows_excursions>`, the higher of its own and twice its
floor. A seasonal stream takes the higher of the two at any age, the pool's from its body alone
until it knows its excursions: a battery's charge in whole percent soon knows its light
one-step peaks, never its rare two-step reading
(:meth:`Detector.borrow_tails <fleetwatch.models.base.Detector.borrow_tails>`). The joint
member's one-reading breaks are judged by the higher of the two once the pool knows its
excursions (one tail per scope, under :data:`~fleetwatch.models.multivariate.JOINT_TAIL`): a
meter's Student-t voltage breaks its tie with the load beyond the χ² model's doubt a few times
a week, too seldom for one device's day to know.

In a scope without a multivariate part (devices of one metric), each metric's pooled tail also
carries the states its devices hold (:func:`_states`, :mod:`~fleetwatch.models.states`): the
regimes of every device whose seasonal member holds two. Where the fleet model has a
multivariate part, that part tells the states its devices hold, of every metric together.

The pooled tails travel with the scope's fleet model (its parameters' ``field_of(kind)``,
:mod:`~fleetwatch.fleet.model`), so they are registered, promoted and published with it and
follow the champion to the scorer. Every scope whose devices have streams has them, a scope of
single-metric devices too: those have no multivariate member to pool, and are scoped by the
metrics of their streams (:func:`streams_of`).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fleetwatch.fleet.pca import MAX_STATES, left_out
from fleetwatch.models.base import Detector
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.seasonal import SeasonalBaseline
from fleetwatch.models.states import PooledTail
from fleetwatch.models.tail import BINS, StreamTail, bin_of

POOLED_FROM = 30.0
"""Values of history a device's tail needs to be pooled: well under ``MIN_HISTORY`` (200, some
four minutes at 1 Hz), so that a fleet started together has a pool in its first minutes, when
its heavy-tailed streams' shocks pass ``EARLY_Z`` of their young spread: a hundred devices' 30
values each are thousands. A young tail adds its body only: its excursions are not counted
before ``MIN_HISTORY``."""

POOLED: tuple[type[Detector], ...] = (LevelShiftDetector, SeasonalBaseline, PcaDetector)
"""The member kinds whose tails the fleet pools."""


def field_of(kind: str) -> str:
    """Where a fleet model's parameters carry the tails pooled of member ``kind``: ``{metric:
    StreamTail.state()}`` with the tail's ``halflife`` and ``prior``."""
    return f"{kind}_tails"


def member_params(params: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """A device's parameters of detector ``kind``: the detector itself, or that member of a
    combined one."""
    if params.get("kind") == kind:
        return params
    for member in params.get("state", {}).get("members", []):
        if member.get("kind") == kind:
            return member  # type: ignore[no-any-return]
    return None


Members = dict[str, Detector]
"""A device's pooled members (:data:`POOLED`) by kind, parsed from its parameters
(:func:`members_of`)."""


def members_of(params: Mapping[str, Any]) -> Members:
    """The pooled members (:data:`POOLED`) a device's parameters hold, parsed. Raises
    :class:`~fleetwatch.models.errors.ModelError`, ``KeyError``, ``TypeError`` or ``ValueError``
    on a malformed one."""
    out: Members = {}
    for cls in POOLED:
        member = member_params(params, cls.kind)
        if member is not None:
            out[cls.kind] = cls.from_params(member)
    return out


def streams_of(members: Members) -> list[str]:
    """The metrics a device's pooled members (:func:`members_of`) have learned, in the order
    first seen."""
    names: dict[str, None] = {}
    for member in members.values():
        names.update(dict.fromkeys(member.learned_metrics()))
    return list(names)


def pool_tails(
    device_params: Iterable[Mapping[str, Any]], states: bool = True
) -> dict[str, dict[str, Any]]:
    """:func:`pool_members` of devices' parameters (each a detector's, or a combined one's)."""
    return pool_members([members_of(params) for params in device_params], states)


def pool_members(devices: Iterable[Members], states: bool = True) -> dict[str, dict[str, Any]]:
    """``{field_of(kind): {metric: pooled tail state}}`` for every pooled kind, from devices'
    parsed members (:func:`members_of`); metrics no device has ``POOLED_FROM`` values of are
    left out. With ``states``, each metric's pooled tail carries the states its devices hold
    (:func:`_states`; without, none: a scope whose fleet model has a multivariate part tells
    its states by that part)."""
    every = list(devices)
    seasonal = [m for d in every if isinstance(m := d.get(SeasonalBaseline.kind), SeasonalBaseline)]
    held = _states(seasonal) if states else {}
    spreads = _spreads(seasonal)
    out = {field_of(cls.kind): _pool(cls, every) for cls in POOLED}
    for pooled in out.values():
        for name, tail in pooled.items():
            tail["states"] = held.get(name, [])
            tail["spread"] = spreads.get(name)
    return out


def _spreads(seasonal: list[SeasonalBaseline]) -> dict[str, float]:
    """Per metric, the median over its devices of their seasonal member's typical spread of it
    (:meth:`~fleetwatch.models.seasonal.SeasonalBaseline.typical_spreads`): the prior a young
    stream's own spread is drawn toward (:func:`~fleetwatch.models.states.drawn_to_fleet`)."""
    seen: dict[str, list[float]] = defaultdict(list)
    for member in seasonal:
        for name, spread in member.typical_spreads().items():
            seen[name].append(spread)
    return {name: float(np.median(values)) for name, values in sorted(seen.items())}


def _states(seasonal: list[SeasonalBaseline]) -> dict[str, list[list[float]]]:
    """Per metric, the states its devices hold (:mod:`~fleetwatch.models.states`): each
    ``[mean, std]`` of a regime of a device whose seasonal member holds two
    (:meth:`~fleetwatch.models.seasonal.SeasonalBaseline.held_states`), the heaviest
    :data:`~fleetwatch.fleet.pca.MAX_STATES` (by the regime's readings)."""
    held: dict[str, list[np.ndarray]] = defaultdict(list)
    for member in seasonal:
        for name, regimes in member.held_states().items():
            held[name].extend(regimes)
    out = {}
    for name, rows in sorted(held.items()):
        stacked = np.asarray(rows)
        heaviest = np.argsort(-stacked[:, 2], kind="stable")[:MAX_STATES]
        out[name] = stacked[heaviest, :2].tolist()
    return out


def _pool(cls: type[Detector], devices: list[Members]) -> dict[str, Any]:
    members: dict[str, list[tuple[StreamTail, np.ndarray]]] = defaultdict(list)
    for parsed in devices:
        member = parsed.get(cls.kind)
        if member is None:
            continue
        for name, tail, own in member.own_tails():
            if tail.summary.weight < POOLED_FROM or tail.interval_ms <= 0:
                continue
            below = tail.peaks.copy()
            if math.isfinite(own):
                below[int(bin_of(own)) :] = 0.0
            members[name].append((tail, below))
    return {name: _pooled(members[name]) for name in sorted(members)}


def _pooled(members: list[tuple[StreamTail, np.ndarray]]) -> dict[str, Any]:
    """One metric's pooled tail state from its devices' ``(tail, peaks below its threshold)``:
    all but the :func:`~fleetwatch.fleet.pca.left_out` widest tails (by their body's mean above
    its ``1 - P_BODY`` quantile), each histogram weighing at most the median device's."""
    tails = [tail for tail, _ in members]
    widths = [tail.summary.tail().u + tail.summary.tail().scale_exp for tail in tails]
    order = np.argsort(-np.asarray(widths), kind="stable")
    kept = sorted(order[left_out(len(members)) :].tolist())
    body = float(np.median([tail.summary.weight for tail in tails]))
    counted = [tail.readings for tail in tails if tail.readings > 0]
    readings = float(np.median(counted)) if counted else 0.0
    counts, peaks, total = np.zeros(BINS), np.zeros(BINS), 0.0
    for i in kept:
        tail, below = members[i]
        counts += tail.summary.counts * min(1.0, body / tail.summary.weight)
        if tail.readings > 0:  # its peaks and readings scaled alike: its rate of peaks kept
            scale = min(1.0, readings / tail.readings)
            peaks += below * scale
            total += tail.readings * scale
    return {
        "counts": counts.tolist(),
        "peaks": peaks.tolist(),
        "readings": total,
        "peak": 0.0,
        "interval_ms": statistics.median(tail.interval_ms for tail in tails),
        "last_ms": None,
        "halflife": tails[-1].summary.halflife,
        "prior": tails[-1].prior,
    }


def tails_of(params: Mapping[str, Any]) -> dict[str, dict[str, StreamTail]]:
    """``{kind: {metric: pooled tail}}`` a fleet model's parameters carry (none: empty).
    Raises ``KeyError``, ``TypeError`` or ``ValueError`` on a malformed one."""
    out: dict[str, dict[str, StreamTail]] = {}
    for cls in POOLED:
        pooled = params.get(field_of(cls.kind), {})
        out[cls.kind] = {
            str(m): PooledTail.load(float(s["halflife"]), dict(s), float(s.get("prior", 0.0)))
            for m, s in pooled.items()
        }
    return out
