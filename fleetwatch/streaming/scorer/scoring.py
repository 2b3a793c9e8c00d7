"""A device's new readings scored and followed through its alert episodes.

The detectors are the device's own (learned parameters; before any, the fixed baseline of
``score.baseline``), with the scope's fleet champion where ``score.fleet_model`` says so
(:func:`~fleetwatch.streaming.scorer.detectors.choose`); each kind of the combined detector
scores on its own (:func:`~fleetwatch.streaming.scorer.observations.observations`), and the
scores go in event-time order to the alert lifecycle (:mod:`~fleetwatch.streaming.scorer.
episodes`).

Readings older than the newest already seen (out of order, within the lateness) come first:
they may fill a dropout's gap, and, scored on their own, from the parameters alone, may extend an
alert back or open one. The in-order readings are then scored as the continuation of the
device's latest readings: scoring memory that spans batches is the trainer's (the CUSUM sums), as
of the parameter version, except what the device's latest readings give, which the scorer keeps
itself (:class:`~fleetwatch.models.base.ScoringMemory`): the flat-line windows slide over the
scorer's own recent values, the change detector's local lines continue from the scorer's, and
the dropout gap is measured from the scorer's own previous reading (or the newest late one), so
a stale parameter version can neither hide a stuck sensor nor fake a gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.scorer.dedup import Sorted
from fleetwatch.streaming.scorer.detectors import FleetLookup, Member, choose
from fleetwatch.streaming.scorer.device_moves import Moves
from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.episodes import resume
from fleetwatch.streaming.scorer.observations import observations
from fleetwatch.streaming.scorer.policy import Policy
from fleetwatch.streaming.scorer.readings import Rows

LOOKBACK = default_detector().lookback
"""Values kept per metric while the device's detectors do not say (the default detector's): its
windows are ready when its first parameters arrive."""


@dataclass(frozen=True)
class Judged:
    """What a batch's scores did to the device's alerts."""

    events: list[dict[str, Any]]
    """Alert events, in the order they happened."""
    open_ids: list[str]
    """The alerts open after the batch, sorted."""


def score(
    device_id: str,
    st: DeviceScoringState,
    params_json: str | None,
    batch: Sorted,
    now_ms: int,
    policy: Policy,
    fleet: FleetLookup | None,
    row_scores: dict[int, float] | None = None,
) -> Judged:
    """Score the batch's new readings (``batch.kept``, not ``None``) with the device's
    detectors of ``params_json`` (its parameters, or ``None`` where they are parsed already)
    and ``fleet``'s champion, and follow them through its episodes, written back to ``st``.
    ``row_scores``, when given, gets every in-order reading's score by ``seq``
    (:func:`~fleetwatch.streaming.scorer.observations.observations`)."""
    assert batch.kept is not None
    lifecycle = resume(device_id, st, now_ms, policy.min_readings, policy.clear_readings)
    members, prior, device = choose(
        device_id, st, params_json, batch.kept, policy.fleet_model, fleet
    )
    older = batch.older
    if older is not None:
        lifecycle.late_readings(older["seq"], older["event_ms"], older["received_ms"])
        late = observations(older, members, policy.baseline, set(), prior=prior, device=device)
        lifecycle.follow_late(late)
    in_order = batch.in_order
    if in_order is not None and len(in_order):
        active = lifecycle.keys_heard(set(in_order["metric"].tolist()))
        last_ms, heard = st["last_seen_ms"], st["late_heard_ms"]
        gap_from = last_ms if heard is None or last_ms is None else max(last_ms, int(heard))
        memory = ScoringMemory(
            gap_from,
            st["recent_values"],
            st["local_trends"],
            st["level_averages"],
            st["joint_surprise"],
        )
        moves = Moves(st["familiar_moves"], policy.familiar_hold_ms)
        baseline = policy.baseline
        found = observations(
            in_order, members, baseline, active, memory, prior, moves, row_scores, device
        )
        lifecycle.follow(found)
        _slide(memory.recent, in_order, _lookback(members))
    st["episodes"] = lifecycle.dump()
    return Judged(lifecycle.events, lifecycle.open_ids)


def _lookback(members: list[Member] | None) -> int:
    """Values to keep per metric: the longest lookback among the device's detectors (the
    default without one)."""
    return max((m.lookback for m, _ in members or ()), default=0) or LOOKBACK


def _slide(recent: dict[str, list[float]], in_order: Rows, keep: int) -> None:
    """Append the in-order readings' values per metric, keeping the last ``keep`` of each."""
    metrics, values = in_order["metric"].tolist(), in_order["value"].tolist()
    grown: dict[str, list[float]] = {}
    for metric, value in zip(metrics, values, strict=True):
        grown.setdefault(metric, list(recent.get(metric, ()))).append(float(value))
    for metric, vals in grown.items():
        recent[metric] = vals[-keep:] if keep > 0 else []
