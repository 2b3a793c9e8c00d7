"""Level shifts: a metric whose recent level has left its normal range, judged by its own history.

Per device and metric, the residual of each reading against the metric's seasonal profile (the
machinery of the seasonal baseline: hour-of-day buckets, time-decayed) is averaged with an
exponentially weighted moving average, ``e_t = (1 - lam) · e_(t-1) + lam · r_t``, and judged in
units of that average's own learned spread: ``z = e / sqrt(ve)``, where ``ve`` is the decayed
mean of ``e²`` over normal readings (half-life ``tail_halflife`` readings). ``ve`` is learned
from the stream, not derived from a noise model, so autocorrelated, quantised or drifting
signals are judged by how far their average normally wanders. Averaging makes a sustained shift
of a fraction of the noise stand out (the EWMA control chart: Roberts 1959; Lucas and Saccucci
1990).

Cleaning: a reading enters the average cleaned of what one reading alone cannot say about the
level (:func:`cleaned_average`): one further than ``ALERT_Z`` single-reading spreads beyond both
the expected level and the average counts as that far, unless the reading before it was out
as far on the same side: a level that moved, not a lone shock. The single readings' spread is
the one the average's learned spread implies (``scale · sqrt((2 - lam) / lam)``). A Gaussian
stream's readings are out with probability ``ALERT_P``, so its average is the plain EWMA; a
lone heavy-tailed reading takes the average at most ``ALERT_Z · sqrt(lam (2 - lam))`` (2.1) of
its spreads past the expected level or the average before it, whichever is further out: from a
calm average, under any threshold (``min_z`` 4.5). A shock is the seasonal member's to judge,
and the average, its spread and its tail stay those of the level. A shift counts whole from its
second reading, and a return to the expected level at once.

Calibration (:mod:`~fleetwatch.models.tail`): ``|z|`` is compared with the stream's own history:
the threshold is the level that the metric's excursions of ``|z|`` pass ``false_alerts_per_day``
times a day, the budget shared by the device's metrics (one excursion is one alert however many
readings the average stays up). The threshold is never below ``min_z``.

Hysteresis: once a metric alerts it keeps alerting while ``|z|`` stays above ``stay`` times the
threshold, so a shift that wobbles is one alert, not many.

Release: an alert also ends once ``|z|`` has stayed under the threshold *and* at most ``release``
of the alert's peak for ``1 / lam`` readings (the average's own memory): the fault is over,
though the metric may not be all the way back — a pump that runs cooler after a fault, its flow a
step lower. Hysteresis alone would hold such an alert for as long as the metric sits between
``stay`` and 1 times the threshold, long after the fault. A wobble's dip is shorter than the
hold, so a wobbling shift stays one alert; a release does not end a dip that stays above the
threshold. A lower ``release`` asks the average to fall further before the alert ends; 1 ends
it once ``|z|`` has stayed under the threshold for the hold. ``None``: hysteresis alone.

Warm-up: a metric is averaged once its profile has ``warmup`` readings, and scored once its
tail holds ``MIN_HISTORY`` (200) values of ``|z|``: about 320 readings in all.

Adaptation: rows the caller excludes (alerts) are not learned, so a fault is not learned as
normal while it lasts (the combined detector's gate learns a lasting new state of the *whole*
device after its ``adapt_s``). Once a metric's readings have been excluded without a break for
``adopt_s`` seconds of event time (``NEW_NORMAL_AFTER_S``, 10 minutes, by default:
``score.new_normal_after_s``), the average at that reading becomes the metric's offset (the
profile learns the readings less the offset from then on) and learning resumes: a step that
stays is the new normal ``adopt_s`` after it (and at least ``SETTLE / lam`` readings after it,
30, so that a metric read every 5 minutes adopts a level its average has reached, after 2.5
hours), one alert from the step until then. ``None`` never adopts: a lasting shift stays an
alert. A trend slow against the profile's half-life widens ``ve`` and the threshold; a stuck
sensor or a dropout is the flat-line detector's, which adopts nothing.

Fleet states: a reading nearer a state the fleet's devices hold (carried with the pooled tails,
:mod:`~fleetwatch.models.states`), that state ``SEPARATION`` apart from the expected level, than
to that level is of another state of the device, not of its level: the average holds its value
over it, and the profile does not learn it. A switch into a state of its kind is no shift.

``adopt_s`` weighs two errors. Shorter than a fault, adoption takes the fault's level as normal
and the return from it alerts again; longer, a lasting consequence of a fault (a pump that stays
cooler after it) alerts for as long as it lasts, and with ``None`` for ever. The default outlasts
a fault of a few minutes (SKAB's last about 400 s each).

Memory: the average, the alerting flag, the alert's peak, how long it has been low enough to
release and the side its last reading lay out of the cleaning's bounds, of each metric, are
carried past every batch — in the parameters, and in the scorer's
:class:`~fleetwatch.models.base.ScoringMemory` (``levels``) — so
a stream scores the same in one batch or many. Learning in mini-batches: the profile's sums are
the same as in one batch; the average's spread, the tail and the carried average are computed
against the profile as it was before each batch, so they differ slightly (like the CUSUM sums).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from fleetwatch.models import learned
from fleetwatch.models.alerting import alerts_of
from fleetwatch.models.base import Readings, ScoringMemory
from fleetwatch.models.batch import Batch, per_metric_runs
from fleetwatch.models.calibration import ALERT_Z, S_ALERT
from fleetwatch.models.errors import HyperParameterError, require_positive
from fleetwatch.models.grid import GRID_SD, Grid, floor_std, shrink
from fleetwatch.models.profile import ProfileDetector
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.models.seasonal import EARLY_Z
from fleetwatch.models.states import nearest_state, states_of
from fleetwatch.models.tail import MIN_HISTORY, StreamTail, calibrated_surprise, tails_in_force

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
TINY = 1e-12
FEW_READINGS = 16
"""Up to this many readings, :func:`cleaned_average` runs its recursion in plain floats: the
numpy calls of the vectorised average cost more than the loop over so few."""
CARRY = 5
"""``[e, alerting, peak, low, side]`` per metric after the last reading: the average, whether it
alerted, the peak ``|z|`` of the alert under way (0: none), for how many readings it has been
low enough to end (see Release) and the side the last reading lay out of the cleaning's bounds
(+1 above, -1 below, 0 within: see Cleaning). A carry of two, written before these, takes an
alert under way to have peaked at its threshold; one of four, its last reading within."""
NEW_NORMAL_AFTER_S = 600.0
"""A metric's shift that lasts this long is its new normal (``adopt_s``)."""
UNBACKED = EARLY_Z / ALERT_Z
"""A young stream of a fleet whose pooled tail knows no excursions yet is held to ``UNBACKED``
times ``min_z`` at least (see :meth:`LevelShiftDetector._threshold`): a stream whose tail
nothing knows is held to the seasonal member's ``EARLY_Z`` over its floor, twice it."""
SETTLE = 3.0
"""An adopted average has followed ``SETTLE / lam`` readings of the new level (with ``lam`` 0.1,
30 readings: within 4 % of it)."""


class Judged(NamedTuple):
    """One metric's readings of a batch, as the detector judges them."""

    rows: npt.NDArray[np.intp]
    """Its warm rows, in time order."""
    expected: FloatArray
    """The profile's value plus the adopted offset."""
    average: FloatArray
    """``e`` after each reading."""
    z: FloatArray
    alerting: BoolArray
    """With hysteresis and release (:mod:`~fleetwatch.models.alerting`)."""
    peak: FloatArray
    """The peak ``|z|`` of the alert under way after each reading (0: none)."""
    fallen: npt.NDArray[np.int64]
    """For how many readings the alert under way has been low enough to end."""
    threshold: float
    """``inf`` while the metric has too little history to be scored."""
    side: int
    """The side its last reading lay out of the cleaning's bounds (:func:`cleaned_average`)."""
    residual: FloatArray
    """Each reading less its expected value: what the average takes in."""
    known: BoolArray
    """Readings in a state the fleet knows, which the average skips."""
    cap: FloatArray
    """The cleaning's bound of each reading (:func:`cleaned_average`)."""


def moving_average(r: FloatArray, lam: float, start: float) -> FloatArray:
    """``e_t = (1 - lam) · e_(t-1) + lam · r_t`` from ``e_(-1) = start``, without a Python loop:
    in blocks short enough that the weights ``(1 - lam)^-j`` stay finite, each block a scaled
    cumulative sum continued from the last."""
    keep = 1.0 - lam
    block = max(1, int(250.0 / -math.log10(keep)))
    out = np.empty(r.size)
    e = start
    for lo in range(0, r.size, block):
        part = r[lo : lo + block]
        powers = _powers(keep, part.size)
        out[lo : lo + part.size] = powers * (e + np.cumsum(lam * part / powers))
        e = float(out[lo + part.size - 1])
    return out


@lru_cache(maxsize=64)
def _powers(keep: float, n: int) -> FloatArray:
    """``keep ** [1, 2, …, n]`` (read-only): the same few per detector, batch after batch."""
    out: FloatArray = np.asarray(keep ** np.arange(1, n + 1), np.float64)
    out.flags.writeable = False
    return out


@dataclass(eq=False, kw_only=True)
class LevelShiftDetector(ProfileDetector):
    kind: ClassVar[str] = "level"

    lam: float = 0.1
    min_z: float = 4.5
    stay: float = 0.5
    release: float | None = 0.7
    adopt_s: float | None = NEW_NORMAL_AFTER_S
    false_alerts_per_day: float = 1.0
    tail_halflife: float = 2000.0
    # the profile's, with this detector's default
    warmup: int = 100

    # learned, a row per metric (not constructor arguments)
    offset: FloatArray = learned.per_metric()
    """Per metric: the level adopted on top of the profile (see Adaptation)."""
    spread: FloatArray = learned.per_metric(2)
    """Per metric ``[W, Σw·e²]`` over normal readings, decayed per reading."""
    carry: FloatArray = learned.per_metric(CARRY, narrower=(2, 4))
    """Per metric, what its average carries past the last reading (:data:`CARRY`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.lam < 1:
            raise HyperParameterError(f"lam must be in (0, 1), got {self.lam}")
        if self.warmup < 2 or not self.tail_halflife > 0:
            raise HyperParameterError(
                f"need warmup >= 2 and tail_halflife > 0, got {self.warmup}, {self.tail_halflife}"
            )
        if not self.min_z > 0 or not 0 < self.stay <= 1:
            raise HyperParameterError(
                f"need min_z > 0 and 0 < stay <= 1, got {self.min_z}, {self.stay}"
            )
        if self.release is not None and not 0 < self.release <= 1:
            raise HyperParameterError(f"release must be in (0, 1] or None, got {self.release}")
        require_positive(self, "adopt_s", or_none=True)
        require_positive(self, "false_alerts_per_day")
        learned.start(self)
        self.tails: list[StreamTail] = []
        self.excluded_since: list[int | None] = []
        self.grid = Grid()
        """Per metric, the step its readings sit on (:mod:`~fleetwatch.models.grid`)."""
        self._held: Mapping[str, list[float]] = {}
        self._fleet: Mapping[str, StreamTail] = {}
        """The fleet's pooled tails by metric (:meth:`borrow_tails`)."""
        self._memo: tuple[Batch, Mapping[str, list[float]], dict[int, Judged]] | None = None
        """The last batch judged from the scorer's memory: :meth:`score` and :meth:`remember`
        ask for the same one."""

    # -- what the scorer asks ----------------------------------------------------------------

    def resume(self, memory: ScoringMemory) -> None:
        self._held = memory.levels
        self._memo = None

    def remember(self, readings: Readings, memory: ScoringMemory) -> None:
        for m, j in self._judged(Batch.of(readings)).items():
            memory.levels[self.profile.metrics[m]] = _carry(j)

    # -- the statistic -----------------------------------------------------------------------

    def _start(self, m: int, held: bool) -> tuple[float, bool, float, int, int]:
        """``e``, alerting, the alert's peak, how long it has been low and the side of the last
        reading, before the batch."""
        name = self.profile.metrics[m]
        carried = self._held.get(name) if held else None
        if carried is None or len(carried) not in (2, 4, CARRY):
            carried = self.carry[m].tolist()
        carried = [*carried, 0.0, 0.0, 0.0][:CARRY]  # a shorter carry: nothing under way
        e, on, peak, fallen, side = carried
        return float(e), bool(on), float(peak), int(fallen), int(side)

    def _judged(self, batch: Batch) -> dict[int, Judged]:
        """:meth:`_judge` from the scorer's memory, once per batch."""
        memo = self._memo
        if memo is not None and memo[0] is batch and memo[1] is self._held:
            return memo[2]
        judged = self._judge(batch, held=True)
        self._memo = (batch, self._held, judged)
        return judged

    def _judge(self, batch: Batch, held: bool) -> dict[int, Judged]:
        """Per metric with warm rows in ``batch``: how they are judged, the average continuing
        from the scorer's memory (``held``) or from the parameters."""
        out: dict[int, Judged] = {}
        if not self.profile.metrics:
            return out
        codes = batch.lookup(self.profile.metrics)
        mean, std, ok = self._expect(batch, codes)
        k = len(self.profile.metrics)
        for m, rows in per_metric_runs(codes, k):
            rows = rows[ok[rows]]
            if rows.size == 0:
                continue
            e0, on0, peak0, fallen0, side0 = self._start(m, held)
            expected = mean[rows] + self.offset[m]
            known = self._known(m, batch.value[rows], expected, std[rows])
            scale = self._scale(m)
            cap = ALERT_Z * self._reading_spread(m, scale, std[rows])
            r = batch.value[rows] - expected
            e, side = _skipping(r, known, self.lam, (e0, side0), cap)
            if self.tails[m].summary.weight < MIN_HISTORY or scale <= 0:
                quiet = np.zeros(rows.size)
                none = np.zeros(rows.size, np.int64)
                out[m] = Judged(
                    rows, expected, e, quiet, quiet.astype(bool), quiet, none, math.inf, side,
                    r, known, cap,
                )  # fmt: skip
                continue
            z = np.abs(e) / max(scale, TINY)
            threshold = self._threshold(m, k)
            # an alert under way from a carry without its peak: its peak taken as the threshold
            peak0 = max(peak0, threshold) if on0 else 0.0
            low = self.stay * threshold
            on = (on0, peak0, fallen0)
            alerting, peak, fallen = alerts_of(z, threshold, low, on, self.release, self._hold())
            out[m] = Judged(
                rows, expected, e, z, alerting, peak, fallen, threshold, side, r, known, cap
            )
        return out

    def _in_known_state(self, batch: Batch) -> BoolArray:
        """Per row: whether its metric's expected value is a state the fleet knows
        (:meth:`_known`), its profile warm or not (``False`` where it has learned
        nothing)."""
        out = np.zeros(len(batch), bool)
        if not self._fleet or not self.profile.metrics:
            return out
        codes = batch.lookup(self.profile.metrics)
        mean, std, _ = self._expect(batch, codes)
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            expected = mean[rows] + self.offset[m]
            out[rows] = self._known(m, batch.value[rows], expected, std[rows])
        return out

    def _reading_spread(self, m: int, scale: float, std: FloatArray) -> FloatArray:
        """The spread of metric ``m``'s single readings about their level, as its average's
        learned spread ``scale`` (:meth:`_scale`) implies it (``scale · sqrt((2 - lam) /
        lam)``: independent readings of that spread average to it) once that spread has the
        ``2 / lam`` readings its tail waits for; before, the profile's ``std`` (not below what
        its grid allows)."""
        if self.spread[m, 0] >= 2.0 / self.lam:
            return np.full(std.size, scale * math.sqrt(self._span()))
        steps = self.grid.steps()
        return floor_std(std, float(steps[m]) if m < steps.size else 0.0)

    def _known(self, m: int, value: FloatArray, expected: FloatArray, std: FloatArray) -> BoolArray:
        """Per reading of metric ``m`` (``value``, its ``expected`` level and profile's
        ``std``): whether it is nearer a state its fleet knows, ``SEPARATION`` apart from that
        level, than to the level (:mod:`~fleetwatch.models.states`). Such a reading is of
        another state of the device, not of its level: the average skips it."""
        states = states_of(self._fleet, self.profile.metrics[m])
        if not states.size:
            return np.zeros(value.size, bool)
        steps = self.grid.steps()
        step = np.full(value.size, float(steps[m]) if m < steps.size else 0.0)
        spread = floor_std(std, step)
        own = np.abs(shrink(value - expected, step)) / spread
        _, _, z = nearest_state(value, expected, spread, step, states)
        known: BoolArray = z < own
        return known

    def own_threshold(self, tail: StreamTail, streams: int) -> float:
        """The threshold a metric's own ``tail`` sets, shared by ``streams`` metrics."""
        return tail.threshold(self.false_alerts_per_day, self._span(), streams, self.min_z)

    def _threshold(self, m: int, streams: int) -> float:
        """Metric ``m``'s threshold: its own tail's, and at any age at least that of the
        fleet's pooled tail (:meth:`borrow_tails`) once the pool knows its excursions — or, while
        neither the stream's own tail nor the pool knows them, ``UNBACKED`` times ``min_z``.

        Why twice the floor: a young stream's own threshold is its body extrapolated from a few
        hundred values of an average, a few dozen independent ones, and it mostly sits at
        ``min_z``, well below where the pooled tails of its kind set it once they know their
        excursions. A fleet started together pools only young tails in the minute after they
        are first trusted, when an average strays past ``min_z`` without a fault.

        Why at any age: a stream that knows its excursions fits them from a few dozen peaks, and
        a machine's few burst peaks fit a light tail (a shape near 0, a threshold near the
        floor); the pool of its kind, hundreds of peaks, knows how far such averages stray.

        Without a fleet model (``fleetwatch detect``, a scope's devices before its first) the
        stream's own threshold rules: with no pool to say how far a young average strays, a
        fixed higher bar for every young stream would cost the faults of its first hours."""
        tail = self.tails[m]
        own = self.own_threshold(tail, streams)
        if not self._fleet:
            return own
        pooled = self._fleet.get(self.profile.metrics[m])
        if pooled is None or not pooled.knows_excursions():
            return own if tail.knows_excursions() else max(own, UNBACKED * self.min_z)
        return max(own, self.own_threshold(pooled, streams))

    def borrow_tails(self, tails: Mapping[str, StreamTail]) -> None:
        self._fleet = tails
        self._memo = None

    def own_tails(self) -> list[tuple[str, StreamTail, float]]:
        return tails_in_force(self.profile.metrics, self.tails, self.own_threshold)

    def _hold(self) -> int:
        """How many readings an alert must have fallen for to end by its release: the
        average's own memory, ``1 / lam``."""
        return max(1, round(1.0 / self.lam))

    def _span(self) -> float:
        return (2.0 - self.lam) / self.lam

    def _evaluate(self, batch: Batch) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Surprise, level (expected plus average), expected value and band per row."""
        n = len(batch)
        surprise = np.zeros(n)
        level, expected, band = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        for m, j in self._judged(batch).items():
            if math.isinf(j.threshold):
                continue
            surprise[j.rows] = self._calibrated(m, j)
            level[j.rows] = j.expected + j.average
            expected[j.rows] = j.expected
            band[j.rows] = j.threshold * self._scale(m)
        return surprise, level, expected, band

    def _calibrated(self, m: int, j: Judged) -> FloatArray:
        """The surprise of metric ``m``'s judged rows ``j`` (a finite threshold): over the
        common alert level while alerting, under it otherwise."""
        # while alerting, the bar is ``stay`` times the threshold (hysteresis)
        bar = np.where(j.alerting, self.stay * j.threshold, j.threshold)
        s = calibrated_surprise(self.tails[m], j.z, bar, S_ALERT)
        on = j.alerting
        out: FloatArray = np.where(on, np.maximum(s, S_ALERT), np.minimum(s, S_ALERT * 0.999))
        return out

    def _surprise(self, batch: Batch) -> FloatArray:
        """:meth:`_evaluate`'s surprise alone (the gate's: no level, expected value or band)."""
        surprise = np.zeros(len(batch))
        for m, j in self._judged(batch).items():
            if not math.isinf(j.threshold):
                surprise[j.rows] = self._calibrated(m, j)
        return surprise

    def _score(self, batch: Batch) -> Scores:
        surprise, level, expected, band = self._evaluate(batch)
        scored = ~np.isnan(band)
        up = np.where(level >= expected, Reason.SHIFT_UP, Reason.SHIFT_DOWN)
        reason = np.where(scored, up, Reason.WARMUP).astype(np.int8)
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        observed = np.where(scored, level, batch.value)
        return Scores.build(self.kind, surprise, names, observed, expected, band, reason)

    # -- learning ----------------------------------------------------------------------------

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        judged = self._judged_before(batch)
        keep = keep.copy()
        for m, j in judged.items():
            self.tails[m].excursions(j.z, j.threshold)
            adopted = self._adopt(m, j.rows, batch.event_ms, keep, j.average)
            if adopted is not None:
                judged[m] = self._reframed(j, adopted)
        shifted = batch.value - self._offsets(batch)
        # a reading in a state the fleet knows is not one of the profile's level, warm or not
        own = keep & ~self._in_known_state(batch)
        self.profile.learn(Batch(batch.event_ms, batch.codes, batch.names, shifted, None), own)
        grow = len(self.profile.metrics) - self.offset.size
        learned.grow(self, len(self.profile.metrics))
        self.tails += [StreamTail(self.tail_halflife) for _ in range(grow)]
        self.excluded_since += [None] * grow
        codes = batch.lookup(self.profile.metrics)
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            self.tails[m].observe(batch.event_ms[rows])
        self.grid.learn_rows(codes, batch.value, len(self.profile.metrics))
        # a metric the profile was not ready for before the batch is measured against the
        # profile as learned now (a first batch, however long, leaves a scoring detector)
        unjudged = set(batch.lookup(self.profile.metrics).tolist()) - set(judged)
        fresh = (
            {m: j for m, j in self._judge(batch, held=False).items() if m not in judged}
            if unjudged
            else {}
        )
        for m, j in {**judged, **fresh}.items():
            kept = keep[j.rows]
            if kept.any():
                self._learn_spread(m, j.average[kept])
            self.carry[m] = _carry(j)

    def _judged_before(self, batch: Batch) -> dict[int, Judged]:
        """:meth:`_judge` of ``batch`` from the parameters, as learning needs it: the one the
        gate of :meth:`learn` just made when it judged this batch without a scorer's memory (the
        same values; learning consumes it, so it is dropped)."""
        memo, self._memo = self._memo, None
        if memo is not None and memo[0] is batch and not memo[1]:
            return memo[2]
        return self._judge(batch, held=False)

    def _learn_spread(self, m: int, e: FloatArray) -> None:
        """Add the averages of normal readings to the spread (decayed per reading), then their
        ``|z|`` under it to the tail."""
        decay = 2.0 ** (-1.0 / self.tail_halflife)
        weights = decay ** np.arange(e.size - 1, -1, -1, dtype=np.float64)
        w, sq = self.spread[m]
        fade = decay**e.size
        self.spread[m] = (w * fade + weights.sum(), sq * fade + float(weights @ e**2))
        w, sq = self.spread[m]
        if w >= 2.0 / self.lam and sq > 0:
            self.tails[m].summary.add(np.abs(e) / self._scale(m))

    def _scale(self, m: int) -> float:
        """The spread of metric ``m``'s average: as measured, but not below what rounding its
        readings to their grid alone would give (0 before anything was measured)."""
        w, sq = self.spread[m]
        if w <= 0 or sq <= 0:
            return 0.0
        steps = self.grid.steps()
        step = float(steps[m]) if m < steps.size else 0.0
        return max(math.sqrt(sq / w), GRID_SD * step * math.sqrt(self.lam / (2.0 - self.lam)))

    def _offsets(self, batch: Batch) -> FloatArray:
        codes = batch.lookup(self.profile.metrics)
        known = codes >= 0
        out: FloatArray = (
            np.where(known, self.offset[np.where(known, codes, 0)], 0.0)
            if (self.offset.size)
            else np.zeros(len(batch))
        )
        return out

    def _adopt(
        self,
        m: int,
        rows: npt.NDArray[np.intp],
        event_ms: npt.NDArray[np.int64],
        keep: BoolArray,
        e: FloatArray,
    ) -> int | None:
        """Once metric ``m`` has been excluded for ``adopt_s`` without a break, its average
        becomes its offset and its later rows of the batch are learned (``keep`` is updated in
        place); the index among ``rows`` where it did (``None``: not in this batch)."""
        since = self.excluded_since[m]
        for i, row in enumerate(rows.tolist()):
            if keep[row]:
                since = None
                continue
            t = int(event_ms[row])
            if since is None:
                since = t
            if self.adopt_s is not None and t - since >= self._adopt_ms(m):
                self.offset[m] += float(e[i])
                keep[rows[i:]] = True
                self.excluded_since[m] = None
                return i
        self.excluded_since[m] = since
        return None

    def _reframed(self, j: Judged, i: int) -> Judged:
        """``j`` after its average was adopted at its ``i``-th reading: the average there is 0
        on the new level, and the readings after it are averaged and cleaned on that level,
        as they would have been in a batch that began after the adoption."""
        e = j.average.copy()
        shift = float(e[i])
        after, side = _skipping(
            j.residual[i + 1 :] - shift, j.known[i + 1 :], self.lam, (0.0, 0), j.cap[i + 1 :]
        )
        e[i] = 0.0
        e[i + 1 :] = after
        return j._replace(average=e, side=side)

    def _adopt_ms(self, m: int) -> float:
        """How long metric ``m`` must have been excluded before its average is adopted:
        ``adopt_s``, and at least ``SETTLE`` readings' worth of time (a slowly sampled metric's
        average has then reached the new level)."""
        assert self.adopt_s is not None
        return max(self.adopt_s * 1000.0, SETTLE / self.lam * self.tails[m].interval_ms)

    # -- parameters --------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            **self.profile.state(),
            **learned.state(self),
            "tails": [t.state() for t in self.tails],
            "excluded_since": list(self.excluded_since),
            "grid": self.grid.state(),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._memo = None
        self.profile.load(state)
        k = len(self.profile.metrics)
        learned.load(self, state, k)
        self.tails = [StreamTail.load(self.tail_halflife, t) for t in state["tails"]]
        self.excluded_since = [None if v is None else int(v) for v in state["excluded_since"]]
        self.grid = Grid.load(state.get("grid"), k)
        if not len(self.tails) == len(self.excluded_since) == k:
            raise ValueError(f"level state lists do not match its {k} metrics")


def _skipping(
    r: FloatArray, skip: BoolArray, lam: float, start: tuple[float, int], cap: FloatArray
) -> tuple[FloatArray, int]:
    """:func:`cleaned_average` of the residuals ``r`` (their ``cap``) but those of ``skip``,
    at which the average stays as it was; and the side of the last reading taken."""
    if not skip.any():
        return cleaned_average(r, lam, start, cap)
    kept = ~skip
    e, side = cleaned_average(r[kept], lam, start, cap[kept])
    taken = np.concatenate([[start[0]], e])
    out: FloatArray = taken[np.cumsum(kept)]  # as of the latest reading taken, at or before
    return out, side


def cleaned_average(
    r: FloatArray, lam: float, start: tuple[float, int], cap: FloatArray
) -> tuple[FloatArray, int]:
    """:func:`moving_average` of ``r`` from ``start`` (the average and the side of the reading
    before), each reading cleaned first; and the side of the last one.

    A reading further than ``cap`` beyond both the expected level (0) and the average before it
    lies out of bounds (its side: +1 above, -1 below). A lone one counts as one ``cap`` beyond
    the nearer of them: ``e_t = e_(t-1) + lam · (clip(r_t, lo_t, hi_t) - e_(t-1))`` with
    ``lo_t = min(e_(t-1), 0) - cap_t`` and ``hi_t = max(e_(t-1), 0) + cap_t`` (Huber's ψ on the
    one-step error: the robust exponential smoothing of Gelper, Fried and Croux 2010). One out
    on the same side as the reading before it is no lone shock but a level that moved, and
    counts whole. So one reading, however far, takes the average ``lam · cap`` at most past the
    expected level or the average before it, whichever is further out; a shift is followed
    whole from its second reading, and a return to the expected level at once. Without a
    reading out of bounds, the average is :func:`moving_average`'s."""
    e0, side0 = start
    if r.size <= FEW_READINGS:  # a scorer's batch: the recursion costs less than the arrays
        return _cleaned_from([], r.tolist(), cap.tolist(), lam, e0, side0)
    e = moving_average(r, lam, e0)
    before = np.concatenate([[e0], e[:-1]])
    out_of = (r > np.maximum(before, 0.0) + cap) | (r < np.minimum(before, 0.0) - cap)
    if not out_of.any():
        return e, 0
    first = int(out_of.argmax())
    head = e[:first].tolist()
    side = side0 if first == 0 else 0
    return _cleaned_from(head, r[first:].tolist(), cap[first:].tolist(), lam, before[first], side)


def _cleaned_from(
    out: list[float], values: list[float], caps: list[float], lam: float, e: float, side: int
) -> tuple[FloatArray, int]:
    """:func:`cleaned_average`'s recursion over ``values`` from the average ``e`` and the
    ``side`` of the reading before, appended to ``out``."""
    prev = float(e)
    for x, c in zip(values, caps, strict=True):
        low, high = min(prev, 0.0) - c, max(prev, 0.0) + c
        now = 1 if x > high else -1 if x < low else 0
        taken = x if now == 0 or now == side else (high if now > 0 else low)
        prev += lam * (taken - prev)
        side = now
        out.append(prev)
    return np.asarray(out, np.float64), side


def _carry(j: Judged) -> list[float]:
    """What a metric carries past a batch: ``[e, alerting, peak, fallen, side]`` after its last
    reading."""
    last = (j.average[-1], j.alerting[-1], j.peak[-1], j.fallen[-1], j.side)
    return [float(v) for v in last]
