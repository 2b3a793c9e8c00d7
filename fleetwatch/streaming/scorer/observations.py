"""What a device's readings look like to its alert lifecycle: the scores of the detectors
:mod:`~fleetwatch.streaming.scorer.detectors` chose for it, as
:class:`~fleetwatch.streaming.scorer.episodes.Observation` s in event-time order. Pure; used by
:mod:`fleetwatch.streaming.scorer.scoring`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import cache, partial
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetwatch.models.base import Detector, ScoringMemory
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import ALERT_SCORE, S_ALERT, score_from_surprise
from fleetwatch.models.device_tail import DeviceTail
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.scores import Reason, Scores, judges_value
from fleetwatch.streaming.scorer.detectors import Member
from fleetwatch.streaming.scorer.device_moves import DEVICE_WIDE_KEY, Moves, Reading, fold_moves
from fleetwatch.streaming.scorer.episodes import CALM_SCORE, DROPOUT, Observation
from fleetwatch.streaming.scorer.readings import Rows


def observations(
    rows: Rows,
    members: list[Member] | None,
    baseline: FixedBaseline,
    active: set[str],
    memory: ScoringMemory | None = None,
    prior: Detector | None = None,
    moves: Moves | None = None,
    row_scores: dict[int, float] | None = None,
    device: DeviceTail | None = None,
) -> list[Observation]:
    """Scored rows as lifecycle observations, per detector kind, in event-time order. A row
    comes back when it is not calm, or when an episode of its key (``active``) is under way —
    the only calm rows the lifecycle needs are those that may close an episode. ``members``
    (:func:`~fleetwatch.streaming.scorer.detectors.members_for`): ``None`` scores with the
    fixed ``baseline``; so does a row whose value none of the device's own members judges for
    good yet (a device with only a fleet champion, parameters learned from fewer readings than
    their warm-up, a metric new to them, a provisional judgement of a young stream), and a row
    of a metric with a baseline episode open.

    The rows are scored as the continuation of the scorer's ``memory`` of the device's in-order
    readings (:class:`~fleetwatch.models.base.ScoringMemory`: the flat-line windows slide over
    exactly the readings before each row, the change detector's local lines continue, the
    dropout gap is measured from ``memory.since_ms``), not of the trainer's copy as of its last
    batch, and the memory's local lines are moved on past these rows. ``None``: rows scored on
    their own, from the parameters alone (late readings). A reading on which every metric moved
    at once comes back as one device-wide observation
    (:mod:`~fleetwatch.streaming.scorer.device_moves`), unless ``prior`` (the scope's champion,
    :func:`~fleetwatch.streaming.scorer.detectors.fleet_prior`) knows the state it moved into;
    then its metrics are held in ``moves`` (the device's, updated in place), their own alerts at
    readings the ``prior`` knows kept under the alert level until each is calm on its own. A
    pattern break the ``prior`` knows does not alert (:func:`fleet_checked`). The per-metric
    members are scored first, and the joint ones told what they found of each reading (for the
    metric a break is blamed on: :meth:`~fleetwatch.models.base.Detector.score`).

    ``row_scores``, when given, gets every reading's score by ``seq``, calm or not
    (:func:`_top_scores`: file mode's row scores; the lifecycle needs only the observations).

    ``device``: the device's one decision (:mod:`~fleetwatch.models.device_tail`), when its
    detector makes one: every member's scores are then on the device's own calibration
    (:func:`device_decided`)."""
    seq, event_ms, received = rows["seq"], rows["event_ms"], rows["received_ms"]
    if not members:
        base = _baseline_observations(rows, baseline, None, seq, event_ms, received, active)
        if row_scores is not None:
            _top_scores(row_scores, seq, np.zeros(len(rows)), base)
        return base
    found: list[tuple[int, int, Observation]] = []
    frame = Batch.from_arrays(rows["event_ms"], rows["metric"], rows["value"])
    # what the fleet knows of these readings: asked at most once, by whoever needs it first
    familiar = None if prior is None else cache(partial(prior.familiar_times, frame))
    dropout_active = f"*\x1f{DROPOUT}" in active
    unjudged = np.ones(len(frame), dtype=bool)
    # what the per-metric members find of each reading on its own, for the joint members'
    # explanation: per-metric members are scored first
    # (none while no per-metric member scored: the joint members are then not told)
    suspicion: npt.NDArray[np.float64] | None = None
    raw = None if row_scores is None else np.zeros(len(frame))
    order = sorted(range(len(members)), key=lambda i: not members[i][0].per_metric)
    each: dict[int, Scores] = {}
    for m_index in order:
        member, label = members[m_index]
        # Late readings come without the scorer's memory: their windows start empty and their
        # lines are the parameters', never what an earlier call on the cached detector left
        # behind (the same readings score the same, cached or not).
        member.resume(ScoringMemory() if memory is None else memory)
        scores = member.score(frame, None if member.per_metric else suspicion)
        if member.reports_dropouts:
            scores = gaps_delivered_live(scores, frame, received)
        if member.per_metric:
            own = scores.surprise
            suspicion = own if suspicion is None else np.maximum(suspicion, own)
        if familiar is not None:
            scores = fleet_checked(scores, event_ms, familiar)
        if memory is not None:
            member.remember(frame, memory)
        each[m_index] = scores
    if device is not None:
        each = {i: device_decided(scores, device) for i, scores in each.items()}
    for m_index in order:
        member, label = members[m_index]
        scores = each[m_index]
        if raw is not None:
            raw = np.maximum(raw, scores.score)
        if label is None:
            unjudged &= ~judges_value(scores.reason)
        wanted = scores.score >= CALM_SCORE
        if active or wanted.any():
            keys = [f"{m}\x1f{k}" for m, k in zip(scores.metric, scores.detector, strict=True)]
            wanted = _with_keys(wanted, keys, active)
        for i in np.flatnonzero(wanted):
            obs = _observation(scores, int(i), seq, event_ms, received, label)
            found.append((obs.event_ms, m_index, obs))
        if dropout_active and member.reports_dropouts:
            calm = np.flatnonzero(scores.reason != Reason.DROPOUT)
            found.extend(
                (int(event_ms[i]), m_index, _calm_dropout(int(i), seq, event_ms, received))
                for i in calm
            )
    # the fixed baseline judges what no learned member can yet (a device's first parameters,
    # learned from fewer readings than its detectors need; a metric new to them), and goes on
    # with a metric while an episode of its own is open, so that the episode can resolve
    ours = f"\x1f{baseline.kind}"
    held = {key[: -len(ours)] for key in active if key.endswith(ours)}
    if held:
        unjudged |= np.isin(rows["metric"], list(held))
    if unjudged.any():
        base = _baseline_observations(rows, baseline, unjudged, seq, event_ms, received, active)
        found.extend((obs.event_ms, -1, obs) for obs in base)
    found.sort(key=lambda t: (t[0], t[1]))
    scored = [obs for _, _, obs in found]
    if scored or DEVICE_WIDE_KEY in active or (moves and moves.held):
        readings = _readings_of(event_ms, rows["metric"], seq, received, rows["value"])
        reverted = None if prior is None else _reverted(prior, frame)
        scored = fold_moves(scored, readings, active, familiar, moves, reverted)
    if row_scores is not None and raw is not None:
        _top_scores(row_scores, seq, raw, scored)
    return scored


def device_decided(scores: Scores, device: DeviceTail) -> Scores:
    """``scores`` on the device's calibration: a row alerts when the device's evidence there
    passes the device's threshold. What the fleet held calm (:func:`fleet_checked`) stays under
    the alert level: its surprise is taken from its score."""
    held = scores.score < score_from_surprise(scores.surprise) - 1e-12
    surprise = np.where(held, S_ALERT * scores.score / (1.0 - scores.score), scores.surprise)
    calibrated = device.calibrate(surprise)
    return replace(scores, score=score_from_surprise(calibrated), surprise=calibrated)


def _top_scores(
    into: dict[int, float],
    seq: npt.NDArray[Any],
    raw: npt.NDArray[np.float64],
    scored: list[Observation],
) -> None:
    """Each reading's score: the highest its members gave (``raw``, a row per reading and
    metric) while that is calm; else the highest of its observations, which hold every score
    that is not calm as the lifecycle judged it (folded into a device-wide move, or kept under
    the alert level for a move the fleet knows)."""
    readings, where = np.unique(seq, return_inverse=True)
    top = np.zeros(readings.size)
    np.maximum.at(top, where, raw)
    judged: dict[int, float] = {}
    for obs in scored:
        judged[obs.seq] = max(judged.get(obs.seq, 0.0), obs.score)
    for s, value in zip(readings.tolist(), top.tolist(), strict=True):
        into[int(s)] = value if value < CALM_SCORE else judged.get(int(s), value)


def _readings_of(
    event_ms: Iterable[int],
    metrics: Iterable[str],
    seq: Iterable[int],
    received: Iterable[int],
    values: Iterable[float],
) -> dict[int, Reading]:
    """The scored rows' readings by event time, as the device-wide fold takes them."""
    grouped: dict[int, tuple[dict[str, float], int, int]] = {}
    for t, metric, n, rx, v in zip(event_ms, metrics, seq, received, values, strict=True):
        entry = grouped.setdefault(int(t), ({}, int(n), int(rx)))
        entry[0][str(metric)] = float(v)
    return {t: Reading(frozenset(m), n, rx, m) for t, (m, n, rx) in grouped.items()}


def _reverted(prior: Detector, frame: Batch) -> Callable[[int, dict[str, float]], bool]:
    """Whether ``prior`` knows the reading at an event time with some metrics' values put back
    (metric → value)."""

    def knows(event_ms: int, values: dict[str, float]) -> bool:
        at = np.flatnonzero(frame.event_ms == event_ms)
        names = [frame.names[c] for c in frame.codes[at]]
        value = np.array([values.get(n, v) for n, v in zip(names, frame.value[at], strict=True)])
        moved = Batch.from_arrays(frame.event_ms[at], np.asarray(names, dtype=object), value)
        return event_ms in prior.familiar_times(moved)

    return knows


def gaps_delivered_live(scores: Scores, frame: Batch, received: npt.NDArray[np.int64]) -> Scores:
    """``scores`` (of ``frame``'s rows, received at ``received``) with each dropout row calm
    where either end of its gap was delivered later than the gap's own limit after it was taken.

    A gap between readings is a dropout only if the readings in it were never sent. A device
    that held a reading longer than a dropout's gap was out of touch and buffering (a gateway's
    receipt time minus the corrected event time is the time the device held it, not the
    network's or the scorer's delay): its buffer arrives at once and in any order, and a
    micro-batch that takes part of it sees gaps that the rest fills a moment later. Inside such
    a buffer the reading opening a gap was held at least as long as the gap, so a gap is judged
    only where the reading closing it was delivered live and so was the one opening it (when
    that one is in the same batch; one from an earlier batch was delivered ahead of it). A
    calm row carries no flat-line surprise either (the member reported the larger of the two);
    the next reading's window judges the values again."""
    dropped = scores.reason == Reason.DROPOUT
    if not dropped.any():
        return scores
    times, inverse = frame.times()
    age = np.full(times.size, np.iinfo(np.int64).min)
    np.maximum.at(age, inverse, frame.sorted_like(received) - frame.event_ms)
    opening_age = np.concatenate([[0], age[:-1]])
    late = frame.unsorted(np.maximum(age, opening_age)[inverse])
    held = dropped & (late > scores.band)
    if not held.any():
        return scores
    none = np.int8(Reason.NONE)
    return replace(
        scores,
        score=np.where(held, 0.0, scores.score),
        surprise=np.where(held, 0.0, scores.surprise),
        reason=np.where(held, none, scores.reason).astype(np.int8),
    )


def fleet_checked(
    scores: Scores, event_ms: npt.NDArray[np.int64], familiar: Callable[[], set[int]]
) -> Scores:
    """``scores`` (of rows whose event times are ``event_ms``, in that order) with each alerting
    pattern break (the PCA member's) at a reading that the fleet's model of the device's kind
    knows — ``familiar()``, the event times :meth:`Detector.familiar_times` of the scope's
    champion gives: every metric within the fleet's range and the metrics together as the
    pooled devices' are —
    kept under the alert level, at :data:`CALM_SCORE`: it opens no episode, and does not close
    one under way either (else an episode would resolve and open again as the fleet's verdict
    went back and forth).

    A device's own tie between its metrics is learned from its own readings — a young device's
    from its first minutes — and a heavy-tailed metric breaks a tight tie many times a day
    (a meter's voltage, Student-t, against the load it sags with), which the χ² model of the
    residual calls a one-in-a-million event. A break the pooled devices show as part of normal
    is no alert; one the fleet has not seen still is. The price: a device whose tie breaks into
    a combination other devices of its kind hold normal is not alerted by this member."""
    alerting = scores.score >= ALERT_SCORE  # most batches have none: no string compare then
    if not alerting.any():
        return scores
    broken = alerting & (scores.detector == PcaDetector.kind)
    if not broken.any():
        return scores
    known = familiar()
    if not known:
        return scores
    held = broken & np.isin(event_ms, np.fromiter(known, np.int64, len(known)))
    if not held.any():
        return scores
    return replace(scores, score=np.where(held, CALM_SCORE, scores.score))


def _with_keys(
    wanted: npt.NDArray[np.bool_], keys: list[str], active: set[str]
) -> npt.NDArray[np.bool_]:
    """Every row of a key that has an episode under way or a row worth looking at: calm rows
    after an anomaly in the same batch are what closes its episode."""
    hot = active | {keys[i] for i in np.flatnonzero(wanted)}
    return np.fromiter((k in hot for k in keys), bool, len(keys))


def _calm_dropout(i: int, seq: Any, event_ms: Any, received: Any) -> Observation:
    nan = float("nan")
    return Observation(
        "*", DROPOUT, 0.0, int(seq[i]), int(event_ms[i]), int(received[i]), nan, nan, nan, ""
    )


def _observation(
    scores: Scores, i: int, seq: Any, event_ms: Any, received: Any, model: str | None = None
) -> Observation:
    reason = int(scores.reason[i])
    kind = DROPOUT if reason == Reason.DROPOUT else str(scores.detector[i])
    score = float(scores.score[i])
    gap_from = None
    if kind == DROPOUT:
        gap_from = int(event_ms[i]) - int(scores.observed[i])
    return Observation(
        metric="*" if kind == DROPOUT else str(scores.metric[i]),
        kind=kind,
        score=score,
        seq=int(seq[i]),
        event_ms=int(event_ms[i]),
        received_ms=int(received[i]),
        value=float(scores.observed[i]),
        expected=float(scores.expected[i]),
        band=float(scores.band[i]),
        reason=scores.explain(i) if score >= ALERT_SCORE else "",
        gap_from_ms=gap_from,
        model=model,
        provisional=reason == Reason.EARLY,
    )


def _baseline_observations(
    rows: Rows,
    baseline: FixedBaseline,
    judge: npt.NDArray[np.bool_] | None,
    seq: Any,
    event_ms: Any,
    received: Any,
    active: set[str],
) -> list[Observation]:
    """The fixed baseline's observations of the rows it ``judge`` s (``None``: all), the rows
    scored one by one in plain floats (:meth:`~fleetwatch.models.baseline.FixedBaseline.
    score_each`): a device's batch is a reading or a few."""
    metrics = rows["metric"].tolist()
    values = rows["value"].tolist()
    scored = baseline.score_each(metrics, values)
    judges = [True] * len(scored) if judge is None else judge.tolist()
    wanted = [s.anomalous and j for s, j in zip(scored, judges, strict=True)]
    if not active and not any(wanted):
        return []  # nothing out of band and no episode of the baseline's open
    # every row of a key with an episode under way or a row out of band: calm rows after an
    # anomaly in the same batch are what closes its episode
    keys = [f"{m}\x1f{baseline.kind}" for m in metrics]
    hot = active | {k for k, w in zip(keys, wanted, strict=True) if w}
    out = []
    for i, (key, s) in enumerate(zip(keys, scored, strict=True)):
        if key not in hot or not judges[i] or s.expected != s.expected:
            continue  # not wanted, or a metric the baseline has no band for
        exp, band, v = float(s.expected), float(s.band), float(values[i])
        out.append(
            Observation(
                metric=str(metrics[i]),
                kind=baseline.kind,
                score=0.5 + 0.5 * s.score if s.anomalous else 0.0,
                seq=int(seq[i]),
                event_ms=int(event_ms[i]),
                received_ms=int(received[i]),
                value=v,
                expected=exp,
                band=band,
                reason=f"{metrics[i]}={v:.6g} outside {exp:.6g}±{band:.6g}" if s.anomalous else "",
            )
        )
    return out
