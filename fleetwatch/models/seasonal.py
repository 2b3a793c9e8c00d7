"""The seasonal baseline: each metric against its own daily profile.

Per device and metric, time-decayed mean and variance per hour-of-day bucket (see
:class:`~fleetwatch.models.profile.SeasonalProfile`), interpolated between bucket centres. A
reading's statistic is ``|z| = |value - expected| / std``, judged against the metric's own
history of ``|z|`` (:class:`~fleetwatch.models.tail.StreamTail`): a row alerts when ``|z|`` passes
the level that the stream's excursions pass ``false_alerts_per_day`` times a day (shared by the
device's metrics), never below about 4.9 (a normal ``p = 1e-6``); its surprise is the stream's
own ``-ln P(X >= |z|)``, scaled so that the threshold is the common alert level. Heavy tails,
bursts and a second regime the profile cannot hold raise the threshold of that stream alone.
With ``false_alerts_per_day=None`` the surprise is the two-sided normal tail of ``z`` (a model's,
not the stream's: for noise that is Gaussian).

A reading's neighbours: a metric that wanders (a room's humidity, a machine's speed under load)
has a profile whose spread holds hours of wander, so a spike of many noise deviations can sit
inside its band. The statistic judged is therefore ``max(|z|, min(|z_n|, jump_ratio·|z|))``, with
``|z_n|`` the reading's distance from the median of its metric's ``jump_window`` readings before
it, in the spread of that residual (:mod:`~fleetwatch.models.neighbours`): a reading far off its
neighbours counts up to ``jump_ratio`` times as far off as its profile alone makes it. Only up
to that many times: a reading that jumps to a value its profile knows (a machine stopping, its
speed near the stopped regime's) is no further off than the profile says. For noise that does
not wander the two distances are about the same, whatever the noise's tail. The neighbours are
every reading the sensor sent (kept or not); the trainer keeps the latest in the parameters and
the scorer its own, newer ones (:meth:`SeasonalBaseline.resume`). ``jump_ratio=None`` (the
default for now): the profile alone. A young stream (its tail short, below) is judged on
``|z|`` alone.

Robustness comes from the exclusion policy of :mod:`base`: rows that alert (the scorer's flags,
or by default the detector's own pre-batch scores) are not learned, so a spike does not widen
the band and a long fault does not become the expected value.

Two regimes: a metric that switches between states (a machine's speed, running or stopped) is
not one wide distribution. A learned reading more than ``SPLIT_Z`` from its profile (one the
combined detector learns "alerts and all" once a lasting move of the whole device is adopted) goes
to a second profile of the metric, ``alt``, as the readings nearest to it do from then on. A reading
is judged against whichever of the two is nearer, the second once its mean stands ``SEPARATION``
standard deviations apart from the first's. Where the first regime's spread is the wider, the
second's is drawn toward it from its first reading, as if it had ``warmup`` readings of it besides
its own: a slow device's new state, of which the combined detector's gate lets in a reading or two,
is its normal from then on. Where it is not (a machine first seen stopped, its speed 0 ± nothing),
the second's spread is its own, and a reading nearest it is not judged by it until it has
``warmup`` readings, as a first regime's are not: the stopped state lends its running one no calm,
and a spread of two readings, judging every reading after them far off, would keep them all out
of its learning. So a spike on a running machine is judged against the running machine's spread,
not against the mixture of running and stopped (whose deviation, and the tail of ``|z|`` that the
moves between the two leave, would make a spike of a hundred running deviations ordinary). Only
runs of far readings (two in a row on one side) reach the second profile, not a heavy tail's lone
shocks; each regime keeps its own tail of ``|z|`` (``alt_tails``), a young one held to the
first's threshold at least, and to the fleet's pooled tail
(:meth:`SeasonalBaseline.borrow_tails`) as a first regime is.
Until the second regime is in use, the states the fleet's devices hold stand in for it
(:mod:`~fleetwatch.models.states`, with the pooled tails): a reading nearer one of them than to
the first regime, and that state ``SEPARATION`` apart, is judged against it in the wider of the
two spreads, and once kept in a run, learned as the second regime.

A fleet's prior for the spread: the first regime's standard deviation is drawn toward the
fleet's typical spread of the metric (carried with the pooled tails), as if the stream had
``warmup`` readings of it besides its own (:func:`~fleetwatch.models.states.drawn_to_fleet`): a
hundred readings of a wandering level see a fraction of the spread a day of them does.

Warm-up: no row of a metric is scored before ``warmup`` readings of it were learned. Until its tail
holds ``MIN_HISTORY`` (200) values of ``|z|`` (about 230 readings) a metric is judged against
``EARLY_Z``, twice the floor (its rows' reason ``EARLY``: the scorer's fixed baseline judges them
too): judged with a normal model's threshold, a heavy-tailed stream would alert in its first
minutes, and those alerts would keep its readings out of every member's learning; not judged at
all, a machine started in those minutes would become part of its normal. Readings learned before
the profile was warm are judged against it as learned after their batch, so a first batch,
however long, leaves the tail a history. A bucket is used once it has ``bucket_warmup``
readings, the metric's overall moments until then.

Hyperparameters: ``halflife_hours`` (memory of the moments in event time; ``None`` never
forgets), ``buckets`` per ``period_hours`` (1 disables seasonality), ``warmup``,
``bucket_warmup``, ``min_std`` (floor of the standard deviation, in the metric's units),
``false_alerts_per_day``, ``tail_halflife`` (readings; the tail's memory, its excursions' ten
times that), ``jump_ratio`` and ``jump_window`` (readings; the neighbours, above; the
neighbours' spread is learned after ``warmup`` readings).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.batch import Batch, per_metric_runs
from fleetwatch.models.calibration import ALERT_Z, S_ALERT, normal_two_sided_surprise
from fleetwatch.models.errors import HyperParameterError, ParamsError, require_positive
from fleetwatch.models.grid import Grid, floor_std, shrink
from fleetwatch.models.neighbours import NeighbourScale, medians_before
from fleetwatch.models.params import array, ints
from fleetwatch.models.profile import ProfileDetector, decay_factor, row_weights
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.models.states import (
    SEPARATION,
    drawn_to_fleet,
    nearest_state,
    spread_of,
    states_of,
)
from fleetwatch.models.tail import (
    MIN_HISTORY,
    PRIOR_WEIGHT,
    StreamTail,
    calibrated_surprise,
    tails_in_force,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


EARLY_Z = 2.0 * ALERT_Z
"""The threshold of ``|z|`` while the stream's tail is unknown (under ``MIN_HISTORY`` values)."""
SPLIT_Z = EARLY_Z
"""A learned reading this far from its metric's profile belongs to the metric's second regime."""


class Deviation(NamedTuple):
    """Per row of a batch, against its metric's profile and tail."""

    expected: FloatArray
    ok: BoolArray
    """Warm: the profile has enough readings to judge it."""
    surprise: FloatArray
    z: FloatArray
    """``|value - expected| / std`` (0 where not warm)."""
    judged: FloatArray
    """The statistic judged against the stream's tail: ``z``, or more where the reading is
    further off its neighbours (see the module's docstring)."""
    band: FloatArray
    """Half-width of the normal range: the threshold in force times the standard deviation."""
    early: BoolArray | None = None
    """Judged against ``EARLY_Z``, its stream's tail still short (``None``: no row)."""
    alt: BoolArray | None = None
    """Judged against the metric's second regime (``None``: no row)."""
    apart: BoolArray | None = None
    """More than ``SPLIT_Z`` from the first regime, the second not in use for it (``None``: no
    row)."""


@dataclass(eq=False, kw_only=True)
class SeasonalBaseline(ProfileDetector):
    kind: ClassVar[str] = "seasonal"

    false_alerts_per_day: float | None = 1.0
    tail_halflife: float = 2000.0
    jump_ratio: float | None = None
    jump_window: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "false_alerts_per_day", or_none=True)
        require_positive(self, "tail_halflife")
        if self.jump_ratio is not None and not self.jump_ratio >= 1:
            raise HyperParameterError(f"jump_ratio must be >= 1 or None, got {self.jump_ratio}")
        if self.jump_window < 3:
            raise HyperParameterError(f"jump_window must be >= 3 readings, got {self.jump_window}")
        self.alt = self.new_profile()
        """Per metric, its second regime (see the module's docstring); empty until one is seen."""
        self.tails: list[StreamTail] = []
        """Per metric, its own history of ``|z|`` (:mod:`~fleetwatch.models.tail`)."""
        self.alt_tails: list[StreamTail] = []
        """Per metric of ``alt``, the history of ``|z|`` in its second regime."""
        self._fleet: Mapping[str, StreamTail] = {}
        """The fleet's pooled tails of ``|z|`` by metric (:meth:`borrow_tails`)."""
        self.grid = Grid()
        """Per metric, the step its readings sit on (:mod:`~fleetwatch.models.grid`)."""
        self.near = NeighbourScale()
        """Per metric, how far off its neighbours' median a normal reading is."""
        self.recent: list[list[float]] = []
        """Per metric, its latest ``jump_window`` readings as learned (the neighbours of the
        next batch's first)."""
        self._neighbours: list[list[float]] | None = None
        """The scorer's latest readings per metric (:meth:`resume`), newer than ``recent``."""
        self._gated: tuple[Batch, Deviation] | None = None
        """The last batch :meth:`_surprise` judged and how: what learning it next starts from."""

    @property
    def lookback(self) -> int:
        return 0 if self.jump_ratio is None else self.jump_window

    def resume(self, memory: ScoringMemory) -> None:
        self._gated = None
        if self.jump_ratio is None:
            return
        self._neighbours = [
            list(memory.recent.get(m) or (self.recent[i] if i < len(self.recent) else ()))
            for i, m in enumerate(self.profile.metrics)
        ]

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        before = len(self.profile.metrics)
        ref_before = self.profile.ref_ms
        judged = self._judged_before(batch) if before else None
        to_alt = np.zeros(len(batch), bool)
        on_alt = np.zeros(len(batch), bool)
        if judged is not None and judged.alt is not None and judged.apart is not None:
            on_alt = judged.alt
            to_alt = keep & (on_alt | _in_runs(batch, judged.apart, judged.expected))
        codes = self.profile.learn(batch, keep & ~to_alt)
        if to_alt.any() or self.alt.metrics:
            alt_before = len(self.alt.metrics)
            alt_codes = self.alt.learn(batch, to_alt)
            self.alt_tails += [
                StreamTail(self.tail_halflife, PRIOR_WEIGHT)
                for _ in range(len(self.alt.metrics) - alt_before)
            ]
            if judged is not None:
                self._learn_tails(self.alt_tails, alt_codes, batch, judged, keep, on_alt)
        k = len(self.profile.metrics)
        self.tails += [StreamTail(self.tail_halflife, PRIOR_WEIGHT) for _ in range(k - before)]
        self.grid.learn_rows(codes, batch.value, k)
        self._learn_neighbours(batch, codes, keep, ref_before, None if judged is None else judged.z)
        # a reading of the second regime, or of one not in use yet, says nothing of the first's
        mine = ~(to_alt | on_alt)
        if judged is not None:
            self._learn_tails(self.tails[:before], codes, batch, judged, keep, mine)
        early = np.ones(len(batch), bool) if judged is None else ~judged.ok
        if not early.any():
            return
        # readings the profile was not warm for are measured against it as learned now (a first
        # batch, however long, leaves the tail a history to judge by)
        fresh = self._deviation(batch, judge=False)
        for m, rows in per_metric_runs(codes, k):
            late = rows[early[rows] & fresh.ok[rows] & keep[rows] & mine[rows]]
            self.tails[m].summary.add(fresh.judged[late])

    def _judged_before(self, batch: Batch) -> Deviation:
        """How ``batch`` deviates from the parameters, as learning needs it: what the gate of
        :meth:`learn` found when it judged this batch with these parameters (a deviation judged
        against the stream's tail holds every field learning reads), else measured now."""
        gated, self._gated = self._gated, None
        if gated is not None and gated[0] is batch and self.false_alerts_per_day is not None:
            return gated[1]
        return self._deviation(batch, judge=False)

    def _learn_tails(
        self,
        tails: list[StreamTail],
        codes: npt.NDArray[np.intp],
        batch: Batch,
        judged: Deviation,
        keep: BoolArray,
        rows_of: BoolArray,
    ) -> None:
        """Every warm reading of ``rows_of`` into its metric's tail (``codes`` index ``tails``),
        |z| of 0 too; the body first, so that the batch's excursions are counted against the
        body that includes its readings (counted against the previous body, a stream that
        switches on and off counts more of its moves as excursions)."""
        k = len(self.profile.metrics)
        for m, rows in per_metric_runs(codes, len(tails)):
            tail = tails[m]
            tail.observe(batch.event_ms[rows])
            warm = rows[judged.ok[rows] & rows_of[rows]]
            cap = self._bar(tail, k)  # in force for the batch
            tail.summary.add(judged.judged[warm[keep[warm]]])
            tail.excursions(judged.judged[warm], cap)

    def _regimes(
        self,
        codes: npt.NDArray[np.intp],
        batch: Batch,
        mean: FloatArray,
        std: FloatArray,
        z: FloatArray,
        step: FloatArray,
    ) -> tuple[BoolArray, BoolArray, FloatArray, FloatArray, FloatArray, BoolArray]:
        """Per row: whether its metric's second regime judges it (nearer, and ``SEPARATION``
        apart from the first), whether it is ``SPLIT_Z`` from the first with the second not in
        use, the expected value, deviation and ``|z|`` of the regime that judges it, and whether
        that is a second regime whose spread is not known yet (the row is not judged)."""
        far = z > SPLIT_Z
        if not self.alt.metrics:
            none = np.zeros(len(batch), bool)
            return (none, far, *self._borrowed(codes, batch, mean, std, z, step, none), none)
        alt_codes = batch.lookup(self.alt.metrics)
        mean2, std2, ok2 = self.alt.expect(
            alt_codes, batch.event_ms, 1, self.bucket_warmup, self.min_std
        )
        # a young second regime's spread is drawn toward the first's where that is the wider,
        # as if it had ``warmup`` readings of it besides its own: a slow device's new state, of
        # which the gate lets in a reading or two, borrows the first regime's noise. A machine
        # that first started, whose stopped speed sits on 0 ± nothing, does not borrow the
        # stopped state's calm for its running noise: its spread is its own, known once it has
        # ``warmup`` readings, as a first regime's is; until then the readings it is nearest
        # are not judged by it (a spread of two readings would keep every reading after them
        # out of its learning)
        seen = np.where(alt_codes >= 0, self.alt.counts[np.maximum(alt_codes, 0), self.buckets], 0)
        prior = float(self.warmup)
        with np.errstate(invalid="ignore"):
            lends = std > floor_std(std2, step)  # a first regime at its floor lends no noise
            var2 = (
                seen * np.square(std2) + prior * np.maximum(np.square(std), np.square(std2))
            ) / (seen + prior)
            std2 = floor_std(np.sqrt(var2), step)
            gap = np.abs(mean2 - mean)
            usable = ok2 & (np.nan_to_num(gap) >= SEPARATION * np.maximum(std, std2))
            z2 = np.abs(shrink(np.nan_to_num(batch.value - mean2), step)) / std2
        alt = usable & (z2 < z)
        own = (np.where(alt, mean2, mean), np.where(alt, std2, std), np.where(alt, z2, z))
        borrowed = self._borrowed(codes, batch, mean, std, z, step, usable)
        lent = borrowed[2] < own[2]
        mean, std, z = (np.where(lent, b, o) for b, o in zip(borrowed, own, strict=True))
        alt &= ~lent
        unknown = alt & ~lends & (seen < self.warmup)
        return alt, far & ~usable, mean, std, z, unknown

    def _drawn_to_fleet(self, codes: npt.NDArray[np.intp], std: FloatArray) -> FloatArray:
        """Per row, its first regime's ``std`` drawn toward its fleet's typical spread of the
        metric (:func:`~fleetwatch.models.states.drawn_to_fleet`), as if the stream had
        ``warmup`` readings of that spread besides its own (the weight a young second regime
        gives the first's): a stream of a hundred readings of a wandering level has seen a
        fraction of the spread its fleet's devices see over a day."""
        if not self._fleet:
            return std
        out = std.copy()
        every = self.buckets
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            spread = spread_of(self._fleet, self.profile.metrics[m])
            seen = float(self.profile.counts[m, every])
            out[rows] = drawn_to_fleet(std[rows], np.full(rows.size, seen), spread, self.warmup)
        return out

    def typical_spreads(self) -> dict[str, float]:
        """Per metric of ``warmup`` readings or more, its first regime's typical standard
        deviation: the median over its buckets of ``bucket_warmup`` readings (its overall one
        where none has), what its fleet pools as a young stream's prior
        (:func:`~fleetwatch.models.states.drawn_to_fleet`)."""
        out: dict[str, float] = {}
        _, sd = self.profile.moments(self.min_std)
        counts = self.profile.counts
        every = self.buckets
        for i, name in enumerate(self.profile.metrics):
            if counts[i, every] < self.warmup:
                continue
            warm = (counts[i, :every] >= self.bucket_warmup) & np.isfinite(sd[i, :every])
            spread = float(np.median(sd[i, :every][warm])) if warm.any() else float(sd[i, every])
            if math.isfinite(spread):
                out[name] = spread
        return out

    def _borrowed(
        self,
        codes: npt.NDArray[np.intp],
        batch: Batch,
        mean: FloatArray,
        std: FloatArray,
        z: FloatArray,
        step: FloatArray,
        usable: BoolArray,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per row: the expected value, deviation and ``|z|`` of the state its fleet knows
        nearest it (:mod:`~fleetwatch.models.states`) where that is nearer than the first
        regime and the metric's own second regime is not in use for the row; the first
        regime's elsewhere. A fleet's state stands in for a second regime the device has not
        learned: a reading judged by it that the device keeps goes to its second regime as a
        reading apart from the first does."""
        mean, std, z = mean.copy(), std.copy(), z.copy()
        if not self._fleet:
            return mean, std, z
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            states = states_of(self._fleet, self.profile.metrics[m])
            if not states.size:
                continue
            rows = rows[~usable[rows]]
            m2, s2, z2 = nearest_state(batch.value[rows], mean[rows], std[rows], step[rows], states)
            nearer = z2 < z[rows]
            near = rows[nearer]
            mean[near], std[near], z[near] = m2[nearer], s2[nearer], z2[nearer]
        return mean, std, z

    def _deviation(self, batch: Batch, judge: bool = True) -> Deviation:
        """Per row: how it deviates from its profile, judged against its stream's tail (without
        ``judge``, the surprise is left at 0: learning needs ``ok`` and ``z`` alone)."""
        codes = batch.lookup(self.profile.metrics)
        mean, std, ok = self._expect(batch, codes)
        step = self.grid.per_row(codes)
        std = floor_std(self._drawn_to_fleet(codes, std), step)
        deviation = shrink(batch.value - mean, step)
        z = np.where(ok, np.abs(deviation) / np.where(ok, std, 1.0), 0.0)
        alt, apart, mean, std, z, unknown = self._regimes(codes, batch, mean, std, z, step)
        alt &= ok
        ok = ok & ~unknown
        band = ALERT_Z * std + 0.5 * step
        jz = self._with_jumps(batch, codes, z, step)
        if not judge:
            return Deviation(mean, ok, np.zeros(len(batch)), z, jz, band, None, alt, apart & ok)
        if self.false_alerts_per_day is None:
            surprise = np.where(ok, normal_two_sided_surprise(z), 0.0)
            return Deviation(mean, ok, surprise, z, z, band, None, alt)
        surprise = np.zeros(len(batch))
        k = len(self.profile.metrics)
        early = np.zeros(len(batch), bool)
        streams = [(self.tails, np.where(alt, -1, codes))]
        if alt.any():
            streams.append((self.alt_tails, np.where(alt, batch.lookup(self.alt.metrics), -1)))
        for tails, judged_codes in streams:
            for m, rows in per_metric_runs(judged_codes, len(tails)):
                tail = tails[m]
                if tail.summary.weight < MIN_HISTORY:  # its tail unknown yet
                    bar = EARLY_Z
                    early[rows] = True
                else:
                    bar = self._bar(tail, k)
                if tails is self.tails:
                    bar = self._held_to_fleet(self.profile.metrics[m], bar, k)
                elif tail.summary.weight < MIN_HISTORY:
                    bar = self._held_to_fleet(self.alt.metrics[m], bar, k)
                if tails is self.alt_tails:
                    # the sensor's noise has one shape in either regime: a second regime's
                    # short history is held to the first one's threshold at least
                    first = self.tails[int(codes[rows[0]])]
                    if first.summary.weight >= MIN_HISTORY:
                        bar = max(bar, self._bar(first, k))
                # a young stream is judged on ``z`` alone: its tail knows nothing yet of how far
                # off their neighbours its readings go
                stat = z[rows] if early[rows[0]] else jz[rows]
                judged = calibrated_surprise(tail, stat, bar, S_ALERT)
                surprise[rows] = np.where(ok[rows], judged, 0.0)
                band[rows] = bar * std[rows] + 0.5 * step[rows]
        return Deviation(mean, ok, surprise, z, jz, band, early, alt, apart & ok)

    def _with_jumps(
        self, batch: Batch, codes: npt.NDArray[np.intp], z: FloatArray, step: FloatArray
    ) -> FloatArray:
        """Per row, ``z`` raised toward its distance from its neighbours' median in their spread,
        up to ``jump_ratio`` times ``z`` (``z`` itself where the metric's neighbours' spread is
        not learned yet or the reading has too few neighbours)."""
        if self.jump_ratio is None or not self.profile.metrics:
            return z
        out = z.copy()
        held = self.recent if self._neighbours is None else self._neighbours
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            sd = self.near.sd(m, self.warmup)
            if not math.isfinite(sd) or m >= len(held):
                continue
            values = batch.value[rows]
            ref = medians_before(held[m], values, self.jump_window)
            with np.errstate(invalid="ignore"):
                far = np.abs(shrink(values - ref, step[rows])) / floor_std(sd, step[rows])
            far = np.where(np.isfinite(far), far, 0.0)
            out[rows] = np.maximum(z[rows], np.minimum(far, self.jump_ratio * z[rows]))
        return out

    def _learn_neighbours(
        self,
        batch: Batch,
        codes: npt.NDArray[np.intp],
        keep: BoolArray,
        ref_before: int | None,
        z: FloatArray | None,
    ) -> None:
        """The spread of the kept readings about their neighbours' median (``z``: their ``|z|``
        against their profile before the batch, ``None`` for none); every reading (kept or not:
        the neighbours are what the sensor read) becomes a neighbour of the next."""
        if self.jump_ratio is None:
            return
        k = len(self.profile.metrics)
        self.near.grow(k)
        self.recent += [[] for _ in range(k - len(self.recent))]
        to_ms = int(self.profile.ref_ms or 0)
        self.near.sums *= decay_factor(ref_before, to_ms, self.halflife_ms)
        step = self.grid.per_row(codes)
        for m, rows in per_metric_runs(codes, k):
            values = batch.value[rows]
            ref = medians_before(self.recent[m], values, self.jump_window)
            r = shrink(values - ref, step[rows])
            used = keep[rows] & np.isfinite(ref)
            sd = self.near.sd(m, self.warmup)
            if z is not None and math.isfinite(sd):
                # a move between two regimes (a machine starting, learned once the gate adopts
                # it) is a reading its profile expects thousands of deviations off its
                # neighbours: it says nothing of how far a reading strays from them
                far = np.abs(r) / floor_std(sd, step[rows])
                used &= ~((far > SPLIT_Z) & (far > self.jump_ratio * z[rows]))
            r = r[used]
            w = row_weights(batch.event_ms[rows][used], to_ms, self.halflife_ms)
            self.near.add(m, r, w)
            self.recent[m] = (self.recent[m] + values.tolist())[-self.jump_window :]
        self._neighbours = None

    def _held_to_fleet(self, metric: str, bar: float, streams: int) -> float:
        """A ``metric``'s threshold ``bar``, at least that of the fleet's pooled tail
        (:meth:`borrow_tails`): where its excursions pass at the budget's rate once it knows
        them, its body's extrapolation before (a fleet started together pools its devices'
        first minutes). The first regime is held however long its
        own history: a tail remembers about ``tail_halflife`` readings, and within them a
        quantised stream's light one-step peaks "know" its excursions yet never see its rare
        two-step reading, which the fleet's devices together do. A second regime is held while
        its tail is young (its early threshold knows nothing of a heavy tail: a machine first
        seen stopped would alert on its running speed's shocks), not once grown: the pool holds
        the first regimes' tails, and a running machine's grown tail judges its own speed."""
        pooled = self._fleet.get(metric) if self._fleet else None
        if pooled is None or pooled.summary.weight < MIN_HISTORY:
            return bar
        return max(bar, self._bar(pooled, streams))

    def borrow_tails(self, tails: Mapping[str, StreamTail]) -> None:
        self._fleet = tails
        self._gated = None

    def own_tails(self) -> list[tuple[str, StreamTail, float]]:
        return tails_in_force(self.profile.metrics, self.tails, self._bar)

    def held_states(self) -> dict[str, FloatArray]:
        """Per metric that holds two regimes, each warm (``warmup`` readings) and
        ``SEPARATION`` apart: its two states, rows ``[mean, std, readings]`` over all its
        readings (what a fleet's devices lend a device that has not seen them:
        :mod:`~fleetwatch.models.states`)."""
        out: dict[str, FloatArray] = {}
        if not self.alt.metrics:
            return out
        first, second = self.profile, self.alt
        mu1, sd1 = first.moments(self.min_std)
        mu2, sd2 = second.moments(self.min_std)
        every = first.buckets
        for j, name in enumerate(second.metrics):
            if name not in first.metrics:
                continue
            i = first.metrics.index(name)
            n1, n2 = first.counts[i, every], second.counts[j, every]
            a = (mu1[i, every], sd1[i, every], n1)
            b = (mu2[j, every], sd2[j, every], n2)
            if min(n1, n2) < self.warmup or not np.isfinite([*a, *b]).all():
                continue
            if abs(a[0] - b[0]) >= SEPARATION * max(a[1], b[1]):
                out[name] = np.array([a, b], dtype=np.float64)
        return out

    def _bar(self, tail: StreamTail, streams: int) -> float:
        """The ``|z|`` at which the stream alerts (none without a budget or a history yet)."""
        budget = self.false_alerts_per_day
        if budget is None or tail.summary.weight < MIN_HISTORY:
            return math.inf
        return tail.threshold(budget, 1.0, streams, ALERT_Z)

    def _surprise(self, batch: Batch) -> FloatArray:
        judged = self._deviation(batch)
        self._gated = (batch, judged)
        return judged.surprise

    def _score(self, batch: Batch) -> Scores:
        d = self._deviation(batch)
        judged = (
            Reason.DEVIATION
            if d.early is None
            else np.where(d.early, Reason.EARLY, Reason.DEVIATION)
        )
        reason = np.where(d.ok, judged, Reason.WARMUP).astype(np.int8)
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        return Scores.build(self.kind, d.surprise, names, batch.value, d.expected, d.band, reason)

    def _state(self) -> dict[str, Any]:
        return {
            **self.profile.state(),
            "tails": [t.state() for t in self.tails],
            "grid": self.grid.state(),
            "alt": self.alt.state(),
            "alt_tails": [t.state() for t in self.alt_tails],
        } | self._neighbours_state()

    def _neighbours_state(self) -> dict[str, Any]:
        """The neighbours' spread and latest readings (none without ``jump_ratio``)."""
        if self.jump_ratio is None:
            return {}
        return {
            "near": self.near.sums.tolist(),
            "near_counts": ints(self.near.counts),
            "recent": self.recent,
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._gated = None
        self.profile.load(state)
        k = len(self.profile.metrics)
        # parameters from before the stream's own tail start one empty
        tails = state.get("tails") or [StreamTail(self.tail_halflife).state()] * k
        self.tails = [StreamTail.load(self.tail_halflife, t, PRIOR_WEIGHT) for t in tails]
        if len(self.tails) != k:
            raise ParamsError(f"seasonal state has {len(self.tails)} tails for {k} metrics")
        self.grid = Grid.load(state.get("grid"), k)
        # parameters from before the neighbours' reference start learning it now
        if state.get("near_counts"):
            self.near = NeighbourScale(
                array(state, "near", (k, 2)), array(state, "near_counts", (k,)).astype(np.int64)
            )
            self.recent = [[float(v) for v in r] for r in state["recent"]]
            if len(self.recent) != k:
                raise ParamsError(f"seasonal state has {len(self.recent)} recent for {k} metrics")
        else:
            self.near, self.recent = NeighbourScale(), []
        self._neighbours = None
        # parameters from before the second regime have none
        self.alt = self.new_profile()
        if state.get("alt"):
            self.alt.load(state["alt"])
        alt_tails = state.get("alt_tails") or []
        self.alt_tails = [StreamTail.load(self.tail_halflife, t, PRIOR_WEIGHT) for t in alt_tails]
        if len(self.alt_tails) != len(self.alt.metrics):
            raise ParamsError(
                f"seasonal state has {len(self.alt_tails)} second-regime tails for "
                f"{len(self.alt.metrics)} metrics"
            )


def _in_runs(batch: Batch, apart: BoolArray, expected: FloatArray) -> BoolArray:
    """The ``apart`` rows that have a neighbour of their metric (the reading before or after it
    in the batch) apart on the same side: a regime is a run of readings, a heavy tail's shock
    one reading alone."""
    if not apart.any():
        return apart
    side = np.sign(batch.value - expected) * apart
    out = np.zeros(len(batch), bool)
    for _, rows in per_metric_runs(batch.codes, len(batch.names)):
        s = side[rows]
        if s.size < 2:
            continue
        same = (s[1:] == s[:-1]) & (s[1:] != 0)
        out[rows[1:]] |= same
        out[rows[:-1]] |= same
    return out
