"""The fleet's tails of the level and seasonal members' statistics: what a device's stream is
held to while its own history cannot set its threshold.

A stream's threshold is where its own excursion peaks pass at the budget's rate
(:class:`~fleetwatch.models.tail.StreamTail`). Until ``MIN_PEAKS`` of them were seen it is the
body's quantile, extrapolated exponentially from a few hundred readings, and a young device's
average strays past a threshold set by minutes of history. Devices of one kind share a sensor's
behaviour, so the others' excursions tell a young one how far its average strays in a day. The
seasonal member's ``|z|`` is the same case.

Pooling, per member kind and metric of a scope: every device whose tail has ``POOLED_FROM``
values adds its body's histogram, the readings its excursions were taken from, and its
excursion peaks, those *past its own threshold* censored there: such a peak was an alert, a
fault as often as not, so its value is not taken (one device's fault must not teach the fleet
that faults are normal), only that it passed the threshold; where past it lies is what the
tail of the other peaks says (:func:`_completed`). The sum is one :class:`StreamTail` — the
excursions of one stream that read as long as all of them — with the devices' median interval
between readings.

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
(:meth:`Detector.borrow_tails <fleetwatch.models.base.Detector.borrow_tails>`).

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
from typing import Any, NamedTuple

import numpy as np

from fleetwatch.fleet.pca import MAX_STATES, left_out
from fleetwatch.models.base import Detector
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.seasonal import SeasonalBaseline
from fleetwatch.models.states import PooledTail
from fleetwatch.models.tail import BINS, EDGES, StreamTail, bin_of

POOLED_FROM = 30.0
"""Values of history a device's tail needs to be pooled: well under ``MIN_HISTORY`` (200, some
four minutes at 1 Hz), so that a fleet started together has a pool in its first minutes, when
its heavy-tailed streams' shocks pass ``EARLY_Z`` of their young spread: a hundred devices' 30
values each are thousands. A young tail adds its body only: its excursions are not counted
before ``MIN_HISTORY``."""

POOLED: tuple[type[Detector], ...] = (LevelShiftDetector, SeasonalBaseline)
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


def streams_of(params: Mapping[str, Any]) -> list[str]:
    """The metrics a device's pooled members (:data:`POOLED`) have learned, in the order first
    seen (its parameters: a detector's, or a combined one's)."""
    names: dict[str, None] = {}
    for cls in POOLED:
        member = member_params(params, cls.kind)
        if member is not None:
            names.update(dict.fromkeys(cls.from_params(member).learned_metrics()))
    return list(names)


def pool_tails(
    device_params: Iterable[Mapping[str, Any]], states: bool = True
) -> dict[str, dict[str, Any]]:
    """``{field_of(kind): {metric: pooled tail state}}`` for every pooled kind, from devices'
    parameters (each a detector's, or a combined one's); metrics no device has
    ``POOLED_FROM`` values of are left out. With ``states``, each metric's pooled tail carries
    the states its devices hold (:func:`_states`; without, none: a scope whose fleet model has
    a multivariate part tells its states by that part)."""
    every = list(device_params)
    seasonal = _seasonal_members(every)
    held = _states(seasonal) if states else {}
    spreads = _spreads(seasonal)
    out = {field_of(cls.kind): _pool(cls, every) for cls in POOLED}
    for pooled in out.values():
        for name, tail in pooled.items():
            tail["states"] = held.get(name, [])
            tail["spread"] = spreads.get(name)
    return out


def _seasonal_members(device_params: list[Mapping[str, Any]]) -> list[SeasonalBaseline]:
    """Each device's seasonal member, read once for the spreads and the states."""
    members = (member_params(params, SeasonalBaseline.kind) for params in device_params)
    return [SeasonalBaseline.from_params(m) for m in members if m is not None]


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


class _Member(NamedTuple):
    """One device's stream as the pool takes it."""

    tail: StreamTail
    below: np.ndarray
    """Its excursion peaks below the bin of its own threshold."""
    past: tuple[int, float]
    """The bin of its own threshold and the weight of its peaks from that bin up (0: none)."""


def _pool(cls: type[Detector], device_params: list[Mapping[str, Any]]) -> dict[str, Any]:
    members: dict[str, list[_Member]] = defaultdict(list)
    for params in device_params:
        member = member_params(params, cls.kind)
        if member is None:
            continue
        for name, tail, own in cls.from_params(member).own_tails():
            if tail.summary.weight < POOLED_FROM or tail.interval_ms <= 0:
                continue
            below = tail.peaks.copy()
            past = (0, 0.0)
            if math.isfinite(own):
                k = int(bin_of(own))
                past = (k, float(below[k:].sum()))
                below[k:] = 0.0
            members[name].append(_Member(tail, below, past))
    return {name: _pooled(members[name]) for name in sorted(members)}


def _pooled(members: list[_Member]) -> dict[str, Any]:
    """One metric's pooled tail state from its devices' streams: all but the
    :func:`~fleetwatch.fleet.pca.left_out` widest tails (by their body's mean above its
    ``1 - P_BODY`` quantile), each histogram weighing at most the median device's.

    A peak past its device's own threshold was an alert, a fault as often as not: its value
    says nothing of the noise, but that the noise's peak passed the threshold's bin does. It is
    a right-censored peak, not a missing one: dropped, the peaks of a heavy tail lose the few
    highest that show its shape, and the pool fits a lighter tail than its devices have. So each
    keeps its weight, spread above its bin's lower edge as the tail fitted to the peaks below
    the thresholds says a peak past that edge lies (:func:`_completed`)."""
    tails = [m.tail for m in members]
    widths = [tail.summary.tail().u + tail.summary.tail().scale_exp for tail in tails]
    order = np.argsort(-np.asarray(widths), kind="stable")
    kept = sorted(order[left_out(len(members)) :].tolist())
    body = float(np.median([tail.summary.weight for tail in tails]))
    counted = [tail.readings for tail in tails if tail.readings > 0]
    readings = float(np.median(counted)) if counted else 0.0
    counts, peaks, total = np.zeros(BINS), np.zeros(BINS), 0.0
    censored = np.zeros(BINS)
    for i in kept:
        tail, below, (k, past) = members[i]
        counts += tail.summary.counts * min(1.0, body / tail.summary.weight)
        if tail.readings > 0:  # its peaks and readings scaled alike: its rate of peaks kept
            scale = min(1.0, readings / tail.readings)
            peaks += below * scale
            total += tail.readings * scale
            censored[k] += past * scale
    out = {
        "counts": counts.tolist(),
        "peaks": peaks.tolist(),
        "readings": total,
        "peak": 0.0,
        "interval_ms": statistics.median(tail.interval_ms for tail in tails),
        "last_ms": None,
        "halflife": tails[-1].summary.halflife,
        "prior": tails[-1].prior,
    }
    if censored.any():
        out["peaks"] = _completed(out, censored).tolist()
    return out


def _completed(state: dict[str, Any], censored: np.ndarray) -> np.ndarray:
    """The pooled ``state``'s peaks with the ``censored`` weight (per bin: peaks known only to
    lie at or past its lower edge) spread over the bins from there up as the tail fitted to the
    uncensored peaks says a peak past that edge lies; piled at its bin where those peaks are too
    few to fit, or the bin lies below the fit's start. Spread once by that fit, the censored
    peaks add their count to the tail, never a shape of their own making."""
    pooled = StreamTail.load(float(state["halflife"]), state, float(state["prior"]))
    out = pooled.peaks.copy()
    fit = pooled.peaks_tail() if pooled.knows_excursions() else None
    for k in np.flatnonzero(censored).tolist():
        out += censored[k] * _past(k, fit)
    return out


def _past(k: int, fit: tuple[float, float, float] | None) -> np.ndarray:
    """Per bin, the probability that a peak at or past ``EDGES[k]`` lies there under ``fit``
    (the generalised Pareto tail ``(start, shape, scale)`` of the peaks); all in bin ``k``
    without a fit or below its start."""
    out = np.zeros(BINS)
    if fit is None or EDGES[k] < fit[0]:
        out[k] = 1.0
        return out
    start, shape, scale = fit
    y = (EDGES[k : BINS + 1] - start) / scale
    nats = np.log1p(shape * y) / shape if shape > 0 else y
    survival = np.exp(nats[0] - nats)  # relative to the edge: no underflow however far out
    survival[-1] = 0.0  # the last bin holds all beyond
    out[k:] = survival[:-1] - survival[1:]
    return out


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
