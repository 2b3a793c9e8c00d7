"""When every metric of a device moves at once: one device-wide alert, not one per metric.

A machine that starts or stops, a device moved to another room, a reading off on every sensor:
at that reading each metric is unusual on its own (a per-metric member scores it at least at the
calm level, ``p < 1e-3``) and some metric alerts. :func:`fold_moves` turns the reading's
per-metric observations into one observation of the device — metric ``*``, kind
:data:`DEVICE_WIDE_KIND` — with the strongest score and every metric's value in its reason; it
opens, updates and resolves like any episode. A reading of one metric, or with some metric calm
on its own, is left as it is, and so is a dropout (device-wide already).

A move into a state the device's fleet knows (the scope's champion's
:meth:`~fleetwatch.models.base.Detector.familiar_times`) is no alert, and its metrics are *held*
from then on (:class:`Moves`, kept in the device's state), because they do not settle together:
a heavy-tailed vibration is soon inside its band while the speed's members still find 0 rpm far
from what they learned. A held metric's own alert at a reading the fleet knows is kept under the
alert level until the metric is calm on its own, or, once the hold is ``hold_ms`` old
(``score.new_normal_after_s``: by then a lasting state is the device's new normal), until its
reading leaves the state it moved to: its own members may never learn that state (a battery
recharged to full, whose seasonal member learns only what it does not alert on). A metric
resting at the value it moved to (a stopped machine's 0 rpm) stays held while it rests, whatever
the others read, since the device's own detectors learn a lasting change only of every metric
together and may never learn that rest. A held metric whose reading leaves the state it moved to
(:meth:`Moves.departed`) alerts on its own, and is no move of the device while another held
metric stays; when every held metric leaves at once, that is the device's next move.

A lone alert is a familiar move too when the fleet knows the reading but would not with the
alerting metrics put back where they were (``reverted``): the other metrics moved with them. A
spike or a dip, which the fleet would know put back, still alerts. With no fleet model to ask, a
move whose every alerting metric is judged provisionally (its stream still young,
:data:`~fleetwatch.models.scores.Reason.EARLY`) is the device learning its states, which nothing
can tell from a fault: neither the move nor those metrics' own alerts at that reading alert;
what judges the device otherwise (the fixed baseline, the joint pattern) stands. Its metrics are
held as after a familiar move, so a metric resting where the move took it is not read as stuck
while it rests; one that reads anything else is judged as it is.

Pure: a step of :func:`~fleetwatch.streaming.scorer.observations.observations`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from itertools import groupby
from types import MappingProxyType
from typing import Any, NamedTuple

from fleetwatch.models.calibration import ALERT_SCORE
from fleetwatch.models.registry import KINDS
from fleetwatch.models.seasonal import EARLY_Z
from fleetwatch.streaming.scorer.episodes import CALM_SCORE, DROPOUT, Observation

DEVICE_WIDE_KIND = "state"
"""The kind (``detector`` on the wire) of a device-wide alert: every metric moved at once."""
PER_METRIC = frozenset(kind for kind, cls in KINDS.items() if cls.per_metric)
"""Detector kinds whose alert is about one metric on its own."""
DEVICE_WIDE_KEY = f"*\x1f{DEVICE_WIDE_KIND}"
"""The episode key of a device-wide alert (metric ``*``)."""
MOVE_OWN = PER_METRIC | {DROPOUT}
"""The kinds a move answers for itself: the metrics' own alerts (folded into it, or dropped
with a young move) and a dropout (passed on at every move)."""
STATE_READINGS = 30
"""Readings of a held metric since its move before a reading can be found to leave that state."""
DEPART_Z = 2.0 * EARLY_Z
"""How far from its state's readings (in their standard deviations) a held metric's reading
leaves the state: twice the threshold a young stream is held to (the seasonal member's
``EARLY_Z``), since a few dozen readings of a heavy tail understate its spread."""
STATE_FLOOR = 1e-3
"""The least standard deviation of a state, relative to its mean."""
TINY = 1e-12


@dataclass
class Moves:
    """The metrics held since a move into a state the fleet knows: metric → ``[the move's event
    time, the value it moved to, and the count, mean and sum of squared deviations of its
    readings since that stayed in the state]`` (the device state's dict, updated in place; a
    bare event time is a hold without a rest, and a pair one without its readings: the shapes
    of holds in older states), and how long a hold lasts at most unless its metric rests."""

    held: dict[str, Any]
    hold_ms: int

    def start(
        self,
        values: Mapping[str, float],
        event_ms: int,
        gone: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """Hold each of ``values``' metrics from this move on. One held already whose reading
        stayed in its state (not ``gone``) keeps that state's readings: the device is still
        settling into the state it moved to."""
        for metric, value in values.items():
            hold = self.held.get(metric)
            kept = (
                [] if isinstance(hold, int | float) or hold is None or metric in gone else hold[2:]
            )
            fresh = [1, value, 0.0] if math.isfinite(value) else []
            self.held[metric] = [event_ms, value, *(kept or fresh)]

    def release(
        self,
        present: frozenset[str],
        unusual: set[str],
        event_ms: int,
        values: Mapping[str, float],
        gone: set[str] | frozenset[str],
    ) -> None:
        """Let go of each held metric calm on its own at this reading, or held for
        ``hold_ms`` and neither on the value it moved to nor in the state it moved to (its
        readings since the move know that state, and this one did not leave it: not
        ``gone``). Past ``hold_ms`` the state is the metric's new normal, whether or not its
        own members have learned it yet."""
        for metric, hold in list(self.held.items()):
            since, rest = (hold, None) if isinstance(hold, int | float) else hold[:2]
            calm = metric in present and metric not in unusual
            resting = rest is not None and values.get(metric) == rest
            timed_out = event_ms - since > self.hold_ms and not resting
            if calm or (timed_out and not self._in_state(metric, gone)):
                del self.held[metric]

    def _in_state(self, metric: str, gone: set[str] | frozenset[str]) -> bool:
        """Whether a held ``metric``'s readings since its move know its state (at least
        ``STATE_READINGS`` of them) and its latest reading did not leave it."""
        hold = self.held[metric]
        known = not isinstance(hold, int | float) and len(hold) >= 5 and hold[2] >= STATE_READINGS
        return known and metric not in gone

    def rest(self, metric: str) -> float | None:
        """The value a held ``metric`` moved to (``None``: not held, or a hold without it)."""
        hold = self.held.get(metric)
        if hold is None or isinstance(hold, int | float) or not math.isfinite(hold[1]):
            return None
        return float(hold[1])

    def resting(self, values: Mapping[str, float]) -> set[str]:
        """The held metrics whose reading in ``values`` is exactly the value they moved to."""
        return {m for m in self.held if m in values and values[m] == self.rest(m)}

    def departed(self, values: Mapping[str, float]) -> set[str]:
        """The held metrics whose reading leaves the state they moved to: more than
        ``DEPART_Z`` standard deviations of their readings since the move (at least
        ``STATE_READINGS`` of them) from those readings' mean — a spike on a machine that has
        just started is an anomaly of the running machine, not its start. The others' readings
        join their state's."""
        out = set()
        for metric, hold in self.held.items():
            value = values.get(metric, math.nan)
            if isinstance(hold, int | float) or len(hold) < 5 or not math.isfinite(value):
                continue
            n, mean, m2 = hold[2:5]
            if n >= STATE_READINGS:
                sd = math.sqrt(m2 / (n - 1))
                if abs(value - mean) > DEPART_Z * max(sd, STATE_FLOOR * abs(mean), TINY):
                    out.add(metric)
                    continue
            n += 1
            delta = value - mean
            mean += delta / n
            hold[2:5] = [n, mean, m2 + delta * (value - mean)]
        return out

    def holds(self, o: Observation, departed: set[str] | frozenset[str] = frozenset()) -> bool:
        """Whether ``o`` is an alert of a held metric's own (not one that ``departed``)."""
        return (
            o.kind in PER_METRIC
            and o.metric in self.held
            and o.metric not in departed
            and o.score >= ALERT_SCORE
        )


class Reading(NamedTuple):
    """What the folding needs of one reading: its metrics, sequence number, arrival and
    values."""

    metrics: frozenset[str]
    seq: int
    received_ms: int
    values: Mapping[str, float] = MappingProxyType({})


def fold_moves(
    found: list[Observation],
    readings: dict[int, Reading],
    active: set[str],
    familiar: Callable[[], set[int]] | None = None,
    moves: Moves | None = None,
    reverted: Callable[[int, dict[str, float]], bool] | None = None,
) -> list[Observation]:
    """``found`` (event-time order) with each reading on which all its metrics (two or more)
    moved at once — every one unusual on its own, one alerting — folded into one
    :data:`DEVICE_WIDE_KIND` observation. ``readings``: by event time, every reading scored;
    ``active``: episode keys under way. While a device-wide episode is under way, every other
    reading gets a :data:`DEVICE_WIDE_KIND` observation too, scored with the weakest metric's own
    score: calm (it closes the episode) once some metric is calm on its own, in the hysteresis
    band while every metric is still unusual, so a device settling into its new state is one
    episode, not a string of them. ``familiar`` (asked once, at the first move) gives the event
    times whose reading is a state the fleet knows (:meth:`Detector.familiar_times` of the
    scope's champion): a move into one is no alert — a machine stopping for the first time, as
    others of its kind do — and reads as calm; with ``moves``, its metrics are held from then
    on (see the module's text); ``reverted`` (the event time, metric → value) tells whether
    the fleet knows the reading with those metrics put back, for a lone alert's move."""
    under_way = DEVICE_WIDE_KEY in active
    if not under_way and not found and not (moves and moves.held):
        return found
    known: set[int] | None = None

    def knows(event_ms: int) -> bool:
        nonlocal known
        if known is None:
            known = familiar() if familiar is not None else set()
        return event_ms in known

    by_time = {t: list(g) for t, g in groupby(found, key=lambda o: o.event_ms)}
    out: list[Observation] = []
    for event_ms in sorted(by_time.keys() | readings.keys()):
        at = by_time.get(event_ms, [])
        reading = readings.get(event_ms)
        present = reading.metrics if reading is not None else frozenset()
        own = [o for o in at if o.kind in PER_METRIC]
        moved = any(o.score >= ALERT_SCORE for o in own)
        unusual = {o.metric for o in own if o.score >= CALM_SCORE}
        values = reading.values if reading is not None else {}
        gone = moves.departed(values) if moves is not None and moves.held else set()
        # a held metric left its state while another stayed in its own: no move of the device
        alone = bool(gone) and moves is not None and bool(present & moves.held.keys() - gone)
        if len(present) >= 2 and moved and present <= unusual and not (alone and knows(event_ms)):
            out.extend(o for o in at if o.score < ALERT_SCORE or o.kind == DROPOUT)
            if familiar is None and _young(own):
                # nothing knows the device's states yet: no fleet model, and every alerting
                # metric's own stream too young to know its tail — a state being learned. What
                # judges the device otherwise (the fixed baseline, the joint pattern) stands.
                out.extend(o for o in at if o.score >= ALERT_SCORE and o.kind not in MOVE_OWN)
                if moves is not None:
                    # a metric resting where the state took it is that state, as after a
                    # familiar move: a stopped machine's 0 rpm is no stuck sensor
                    moves.start(_moved_to(reading, present), event_ms, gone)
                if under_way and reading is not None:
                    weakest = min(_own_score(at, metric) for metric in present)
                    out.append(_settling(reading, event_ms, weakest))
                continue
            if knows(event_ms):
                if moves is not None:
                    moves.start(_moved_to(reading, present), event_ms, gone)
                if under_way and reading is not None:
                    out.append(_settling(reading, event_ms, 0.0))
                continue
            out.append(_device_wide(at, present))
            under_way = True
            continue
        if (
            moves is not None
            and reverted is not None
            and moved
            and not under_way
            and len(present) >= 2
            and knows(event_ms)
        ):
            back = _put_back(own, moves, gone)
            # the others moved with it: back where it was, the fleet would not know the reading
            if back and not reverted(event_ms, back):
                moves.start(_moved_to(reading, back), event_ms, gone)
                gone = gone - back.keys()
        if moves is not None and moves.held:
            moves.release(present, unusual, event_ms, values, gone)
            held = [moves.holds(o, gone) for o in at]
            if any(held):
                # a metric still at its rest is held whatever the others read (a burst on a
                # stopped machine's vibration is that metric's alert, not its speed's)
                resting = moves.resting(values)
                at = [
                    replace(o, score=CALM_SCORE)
                    if h and (o.metric in resting or knows(event_ms))
                    else o
                    for o, h in zip(at, held, strict=True)
                ]
        out.extend(at)
        if under_way and reading is not None:
            weakest = min(_own_score(at, metric) for metric in present) if present else 0.0
            out.append(_settling(reading, event_ms, weakest))
    return out


def _put_back(own: list[Observation], moves: Moves, gone: set[str]) -> dict[str, float]:
    """The alerting metrics of a reading, each with the value it would read had it not moved:
    the rest a held metric left (``gone``: a stopped machine's speed as it starts again), or
    what its member expected of a metric not held."""
    back: dict[str, float] = {}
    for o in own:
        if o.score < ALERT_SCORE:
            continue
        rest = moves.rest(o.metric) if o.metric in gone else None
        if rest is not None:
            back[o.metric] = rest
        elif o.metric not in moves.held and math.isfinite(o.expected):
            back[o.metric] = o.expected
    return back


def _young(own: list[Observation]) -> bool:
    """Whether every metric alerting at a reading is judged provisionally by one of its
    members (its stream's tail still short): a machine's first stop is also a flat line at a
    rest its flat-line member has not seen yet, and that verdict is no older than the stream."""
    alerting = {o.metric for o in own if o.score >= ALERT_SCORE}
    provisional = {o.metric for o in own if o.score >= ALERT_SCORE and o.provisional}
    return bool(alerting) and alerting <= provisional


def _settling(reading: Reading, event_ms: int, score: float) -> Observation:
    """The device-wide observation of a reading while a device-wide episode is under way."""
    nan = float("nan")
    return Observation(
        "*", DEVICE_WIDE_KIND, score, reading.seq, event_ms, reading.received_ms, nan, nan, nan, ""
    )


def _own_score(at: list[Observation], metric: str) -> float:
    """The highest score a per-metric detector gave ``metric`` at this reading (0: none)."""
    return max((o.score for o in at if o.metric == metric and o.kind in PER_METRIC), default=0.0)


def _moved_to(reading: Reading | None, metrics: Iterable[str]) -> dict[str, float]:
    """What each of ``metrics`` reads at the move (NaN where not known: a hold without a
    rest)."""
    values = reading.values if reading is not None else {}
    return {m: values.get(m, math.nan) for m in metrics}


def _device_wide(at: list[Observation], present: frozenset[str]) -> Observation:
    bad = [o for o in at if o.score >= ALERT_SCORE and o.kind != DROPOUT]
    top = max(bad, key=lambda o: o.score)
    values: dict[str, float] = {}
    unusual = [o for o in at if o.score >= CALM_SCORE and o.kind != DROPOUT]
    for o in sorted(unusual, key=lambda o: -o.score):
        if o.metric in present:
            values.setdefault(o.metric, o.value)
    moved = ", ".join(f"{m}={v:.6g}" for m, v in sorted(values.items()))
    return Observation(
        metric="*",
        kind=DEVICE_WIDE_KIND,
        score=top.score,
        seq=top.seq,
        event_ms=top.event_ms,
        received_ms=top.received_ms,
        value=top.value,
        expected=top.expected,
        band=top.band,
        reason=f"every metric moved at once ({moved}); strongest: {top.reason}",
        model=top.model,
    )
