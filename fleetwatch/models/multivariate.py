"""The multivariate detector: PCA reconstruction error across a device's metrics.

Readings at the same event time form a vector of the device's metrics. The model is the
correlation structure of those vectors: standardise each metric, keep the ``components``
leading principal axes of the correlation matrix, and score a vector by its reconstruction
error off that subspace, each residual axis weighted by its own variance,
``Q = Σ_j (v_jᵀz)² / λ_j`` over the residual axes ``v_j`` (eigenvalue ``λ_j``). A reading that
is normal metric by metric but breaks how the metrics move together (a humidity that stops
following temperature, a fan that spins while the current is off) has a large ``Q``. (The plain
squared error ``|z - P Pᵀ z|²`` would let an independent noisy metric drown a break of a tight
correlation: its residual axis has variance 1 where the broken one has 0.02.)

Why PCA, not IsolationForest: the parameters must be a small JSON record on a compacted topic
and must update from each mini-batch without the history. PCA is determined by the first two
moments, so the state is a weight, a mean vector and a scatter matrix (time-decayed like the
other detectors, so learning in k mini-batches equals one batch up to float rounding, and the
moments of several devices of one kind can be summed into a fleet-scope model). A forest of
100 trees is tens of thousands of numbers, cannot be updated incrementally, and its scores have
no distribution to calibrate against. The components are the eigenvectors scikit-learn's
``PCA`` finds on the same standardised rows (checked in the tests against
``sklearn.decomposition.PCA``); they are derived from the moments on load rather than stored.

Only the residual axes along which the metrics are tied are judged: those whose eigenvalue is at
most ``max_axis_var`` (0.25) of a standardised metric's variance. An axis near 1 is one metric's
own variation, independent of the others (a temperature that wanders by itself); judging it
would duplicate, with a Gaussian model and a mean that follows slowly, what the per-metric members
judge against the metric's own tail, and hold an alert on a wandering temperature for as long as
it wanders. With no tied axis the detector scores nothing; ``None`` judges every residual axis.

Calibration: with Gaussian readings ``Q`` is χ² with as many degrees of freedom as judged axes; the
Wilson-Hilferty normal transform of χ² gives ``p`` and the surprise of a reading alone. A row's
score is the lasting evidence of a break (:mod:`~fleetwatch.models.lasting`: broken on two
readings in a row, for three readings together, or beyond doubt on one), so a heavy-tailed
metric's one-reading shock is left to that metric's own members; the scorer carries what it
needs across batches in :attr:`~fleetwatch.models.base.ScoringMemory.joint`, the parameters in
``last``. With ``shock_alerts_per_day`` set (the default members set it to the device's budget)
a break of one reading alone must also pass the level the device's one-reading breaks pass
that many times a day (its own tail of the residual's deviate, kept in the parameters as
``tail``, and at any age the fleet's pooled tail of it where that sets the higher bar once it
knows its excursions; by the χ² model alone until one of them knows them): a meter's Student-t
voltage breaks its loose tie with the load "beyond doubt" several times a week. The faults the
device's tail has seen (a level shift, a correlated fault) are peaks far beyond the rest, which
the tail's fit leaves out (``StreamTail._without_outlier``), so they do not raise the bar for
the next one. Told what the per-metric members found (``suspicion``, below), a break of one
reading alone counts only where the blamed metric's own members found the reading at least
calm-level unusual (``p ≤ 1e-3``): a shock inside the metric's own tail is its members' to
judge; a young metric's spike, which its members find unusual but hold to their early
threshold, is the joint member's to find.

With ``false_alerts_per_day`` set (off by default) the deviate is judged like the per-metric
members' statistic, against the device's own history of it
(:class:`~fleetwatch.models.tail.StreamTail`, computed on each batch against the model before
it): the level its excursions pass that many times a day, never below ``ALERT_Z``, by the χ²
model until ``MIN_PEAKS`` excursions have ended. It quiets a tie that drifts looser than the
young model learned, but on Gaussian noise it only raises the threshold, and correlated faults
under it go unfound.

Residual eigenvalues are floored at ``min_residual_var`` (of a standardised metric's unit variance)
so nearly collinear metrics do not make every rounding error an anomaly — nor a device that has
learned two operating states (a machine on and off): its principal axis then runs between the two,
with only the little noise of the newer one off it, and with a tiny floor every reading of that
state would break the pattern until hundreds of them were learned. The floor is 0.05, a residual
standard deviation of 0.22 of a metric's: a tie learned over a young device's first minutes looks
tighter than it holds (a meter's voltage sags with its load, and wanders on its own over tens of
minutes; a machine's vibration follows its speed only loosely).

The explanation blames the metric which, corrected alone, best explains the reading — the largest
drop in the Mahalanobis distance, ``(Pz)_j² / P_jj`` with ``P`` the inverse of the (floored)
correlation matrix — and gives its value expected from the other metrics, ``z_j - (Pz)_j / P_jj``,
and that expectation's band. The residual off the subspace alone cannot tell which metric moved
(with two metrics it is the same for both); the principal axis can: a temperature 18 standard
deviations from its mean beside a usual humidity is the temperature's fault, not the humidity's.
Told what the per-metric members found of each reading (:meth:`score`'s ``suspicion``: the
combined detector and the scorer do), the blame goes to the largest sum of half that drop (the
log-likelihood ratio of "this metric alone moved") and the metric's own surprise. A machine
whose speed and vibration are one tie across its two states cannot tell by the pattern which
of them broke it: by the pattern alone, a running machine's vibration that falls to a stopped
one's level is blamed on its speed (its speed "expected" far below zero from the other
metrics); the vibration's own members, which see it move, tip the blame.

A reading is scored when all the model's metrics are present at its event time; the metric set
is fixed by the first batch that has at least ``components + 1`` metrics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fleetwatch.models.base import Readings, ScoringMemory
from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import ALERT_Z, S_ALERT, normal_upper_surprise
from fleetwatch.models.errors import HyperParameterError, require_positive
from fleetwatch.models.grid import GRID_SD, Grid, shrink
from fleetwatch.models.lasting import SINGLE, WINDOW, chi2_deviate, lasting
from fleetwatch.models.params import array, floats
from fleetwatch.models.profile import DecayedDetector, advance, row_weights
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.models.tail import MIN_HISTORY, StreamTail, calibrated_surprise

FloatArray = npt.NDArray[np.float64]

JOINT_TAIL = "*"
"""The name the fleet's pool keeps the residual's tail under (:mod:`~fleetwatch.fleet.tails`):
one per scope, whose devices share their metrics."""


@dataclass(frozen=True)
class PcaModel:
    """What scoring needs, derived from the moments."""

    mean: FloatArray
    std: FloatArray
    axes: FloatArray
    """(metrics, components), orthonormal columns."""
    residual_axes: FloatArray
    """(metrics, judged), the residual eigenvectors that are judged: those of eigenvalue at most
    ``max_axis_var`` (all with ``None``)."""
    residual_var: FloatArray
    """Their (floored) eigenvalues."""
    precision: FloatArray
    """(metrics, metrics), the inverse of the correlation matrix with floored eigenvalues."""
    step: FloatArray
    """Per metric, the step of its readings' grid (0: none), :mod:`~fleetwatch.models.grid`."""


def wide(batch: Batch, metrics: list[str]) -> tuple[Any, Any, FloatArray]:
    """Unique event times, each row's index into them, and the (time, metric) value matrix
    (read-only: worked out once per batch and list of metrics, for the gate and the learning
    alike)."""
    key = ("wide", *metrics)
    held: tuple[Any, Any, FloatArray] | None = batch.memo.get(key)
    if held is None:
        codes = batch.lookup(metrics)
        times, inverse = batch.times()
        matrix = np.full((times.size, len(metrics)), np.nan)
        known = codes >= 0
        matrix[inverse[known], codes[known]] = batch.value[known]
        matrix.flags.writeable = False
        held = batch.memo[key] = (times, inverse, matrix)
    return held


@dataclass(eq=False, kw_only=True)
class PcaDetector(DecayedDetector):
    kind: ClassVar[str] = "pca"
    per_metric: ClassVar[bool] = False

    components: int = 1
    warmup: int = 50
    min_residual_var: float = 0.05
    max_axis_var: float | None = 0.25
    false_alerts_per_day: float | None = None
    tail_halflife: float = 2000.0
    shock_alerts_per_day: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.components < 1:
            raise HyperParameterError(f"components must be >= 1, got {self.components}")
        require_positive(self, "min_residual_var")
        require_positive(
            self, "max_axis_var", "false_alerts_per_day", "shock_alerts_per_day", or_none=True
        )
        require_positive(self, "tail_halflife")
        self.tail = StreamTail(self.tail_halflife)
        """The device's own history of the residual's statistic (:mod:`~fleetwatch.models.tail`)."""
        self.metrics: list[str] = []
        self.shift = np.zeros(0)
        self.weight = 0.0
        self.sum = np.zeros(0)
        self.scatter = np.zeros((0, 0))
        self.count = 0
        self.ref_ms: int | None = None
        self.grid = Grid()
        """Per metric, the step its readings sit on (:mod:`~fleetwatch.models.grid`)."""
        self.bounds: FloatArray | None = None
        """(2, metrics): the lowest and highest value some pooled device holds normal (a fleet
        model's, :func:`~fleetwatch.fleet.pca.pool_pca`); ``None`` for a device's own."""
        self.states: FloatArray | None = None
        """(2, devices, metrics): each pooled device's own low and high end of every metric (a
        fleet model's, :func:`~fleetwatch.fleet.pca.device_states`); ``None`` for a device's
        own, and for a fleet model pooled before they were kept."""
        self._model: PcaModel | None = None
        self.last: list[float] = []
        """What the complete readings learned last leave for the next one's lasting evidence
        (:func:`~fleetwatch.models.lasting.lasting`), judged against the model before their
        batch."""
        self._held: list[float] = []
        """The scorer's memory of the same (:attr:`ScoringMemory.joint`), newer than ``last``."""
        self._memo: tuple[Batch, PcaModel, list[float], list[float]] | None = None
        """The last batch judged, the model it was judged with, what was carried into it and
        what it leaves."""
        self._fleet: StreamTail | None = None
        """The fleet's pooled tail of the residual's statistic (:meth:`borrow_tails`)."""
        self._energies: tuple[Batch, PcaModel, FloatArray] | None = None
        """The last batch whose residual energies were worked out, the model they are of and
        the energies: learning the batch the gate just judged reads its statistic from them."""

    def resume(self, memory: ScoringMemory) -> None:
        self._held = memory.joint
        self._memo = None

    def remember(self, readings: Readings, memory: ScoringMemory) -> None:
        batch = Batch.of(readings)
        memo = self._memo
        if memo is None or memo[0] is not batch or memo[1] is not self.model():
            self._surprise(batch)  # not judged yet (the scorer judges, then remembers)
            memo = self._memo
        if memo is not None and memo[0] is batch:
            memory.joint[:] = memo[3]

    @property
    def poolable(self) -> bool:
        return True

    @property
    def warmed_up(self) -> bool:
        return self.model() is not None

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        if not self.metrics:
            if len(batch.names) <= self.components:
                return
            self.metrics = list(batch.names)
            d = len(self.metrics)
            self.sum, self.scatter = np.zeros(d), np.zeros((d, d))
        self.grid.learn_rows(batch.lookup(self.metrics), batch.value, len(self.metrics))
        times, inverse, matrix = wide(batch, self.metrics)
        if not self.shift.size:
            first = np.flatnonzero(~np.isnan(matrix).any(axis=1))
            if not first.size:
                return
            self.shift = matrix[first[0]].copy()
        excluded = np.bincount(inverse[~keep], minlength=times.size) > 0
        complete = np.asarray(~np.isnan(matrix).any(axis=1), dtype=bool)
        use = complete & ~excluded
        model = self.model()  # before the batch
        if model is not None and complete.any():
            self.last = self._left(batch, model, matrix, complete)
        if self._budget() is not None and model is not None and complete.any():
            # the statistic of every complete reading against the model as it was before it
            statistic = self._statistic(matrix, complete, model, batch)
            self.tail.observe(times[complete].astype(np.int64))
            cap = self._bar()  # in force for the batch
            self.tail.summary.add(statistic[use])
            self.tail.excursions(statistic[complete], cap)
        to_ms, factor = advance(self.ref_ms, int(times[-1]), self.halflife_ms)
        self.ref_ms = to_ms
        y = matrix[use] - self.shift
        w = row_weights(times[use], to_ms, self.halflife_ms)
        self.weight = self.weight * factor + float(w.sum())
        self.sum = self.sum * factor + w @ y
        self.scatter = self.scatter * factor + (y * w[:, None]).T @ y
        self.count += int(use.sum())
        self._model = None

    def model(self) -> PcaModel | None:
        """The fitted PCA, or ``None`` while warming up."""
        if self._model is None and self.count >= self.warmup and self.weight > 0:
            self._model = self._fit()
        return self._model

    def _fit(self) -> PcaModel:
        mean_y = self.sum / self.weight
        cov = self.scatter / self.weight - np.outer(mean_y, mean_y)
        # a metric on a grid varies at least by half its step (GRID_SD), independently
        step = self.grid.steps()
        if step.size == cov.shape[0] and step.any():
            raise_to = (GRID_SD * step) ** 2
            cov = cov + np.diag(np.maximum(raise_to - np.diag(cov), 0.0))
        else:
            step = np.zeros(cov.shape[0])
        std = np.sqrt(np.maximum(np.diag(cov), 1e-18))
        corr = cov / np.outer(std, std)
        eigval, eigvec = np.linalg.eigh(corr)
        k = self.components
        axes = eigvec[:, -k:]
        floored = np.maximum(eigval, self.min_residual_var)
        precision = (eigvec / floored) @ eigvec.T
        judged = np.ones(eigval.size - k, bool)
        if self.max_axis_var is not None:
            judged = floored[:-k] <= self.max_axis_var
        return PcaModel(
            mean_y + self.shift,
            std,
            axes,
            eigvec[:, :-k][:, judged],
            floored[:-k][judged],
            precision,
            step,
        )

    @staticmethod
    def _standardised(
        matrix: FloatArray, complete: npt.NDArray[np.bool_], model: PcaModel
    ) -> FloatArray:
        deviation = np.where(complete[:, None], matrix, model.mean) - model.mean
        out: FloatArray = shrink(deviation, model.step) / model.std
        return out

    @staticmethod
    def _energy(z: FloatArray, model: PcaModel) -> FloatArray:
        """Per standardised vector, its residual ``Q`` (0 with no judged axis)."""
        if not model.residual_var.size:  # no tie between the metrics to break
            return np.zeros(len(z))
        out: FloatArray = ((z @ model.residual_axes) ** 2 / model.residual_var).sum(axis=1)
        return out

    @classmethod
    def _wilson_hilferty(cls, z: FloatArray, model: PcaModel) -> FloatArray:
        """Per standardised vector, its residual ``Q`` as a normal deviate (Wilson-Hilferty;
        0 with no judged axis)."""
        h = model.residual_var.size
        if not h:
            return np.zeros(len(z))
        return chi2_deviate(cls._energy(z, model), h)

    def _statistic(
        self,
        matrix: FloatArray,
        complete: npt.NDArray[np.bool_],
        model: PcaModel,
        batch: Batch | None = None,
    ) -> FloatArray:
        """Per vector, the magnitude the device's tail is kept of: the residual's deviate, 0
        below its mean (``matrix`` is ``batch``'s, when given: its energies under ``model``
        are read from :meth:`_residual` where it worked them out)."""
        held = self._energies
        if batch is None or held is None or held[0] is not batch or held[1] is not model:
            z = self._standardised(matrix, complete, model)
            return np.maximum(self._wilson_hilferty(z, model), 0.0)
        h = model.residual_var.size
        deviate = chi2_deviate(held[2], h) if h else np.zeros(len(matrix))
        return np.maximum(deviate, 0.0)

    def _residual(
        self, batch: Batch, model: PcaModel
    ) -> tuple[Any, Any, Any, Any, FloatArray, FloatArray]:
        """Per event time: each row's index into them, the value matrix, whether it is
        complete, its standardised vector, the surprise of its residual (of that reading alone)
        and the residual's energy ``Q``."""
        _, inverse, matrix = wide(batch, self.metrics)
        complete = np.asarray(~np.isnan(matrix).any(axis=1), dtype=bool)
        z = self._standardised(matrix, complete, model)
        energy = self._energy(z, model)
        self._energies = (batch, model, energy)
        surprise = self._one_reading(energy, model)
        return inverse, matrix, complete, z, np.where(complete, surprise, 0.0), energy

    def _one_reading(self, energy: FloatArray, model: PcaModel) -> FloatArray:
        """The surprise of each residual ``energy`` alone (0 with no judged axis)."""
        h = model.residual_var.size
        return self._calibrated(chi2_deviate(energy, h)) if h else np.zeros(energy.size)

    def _calibrated(self, wh: FloatArray) -> FloatArray:
        """The surprise of the residual's deviates: by the χ² model, or by the tail in force
        (:meth:`_judged_by`) when held to a budget."""
        tail, bar = self._judged_by()
        if self.false_alerts_per_day is None or not tail.knows_excursions():
            return normal_upper_surprise(wh)
        out: FloatArray = calibrated_surprise(tail, np.maximum(wh, 0.0), bar, S_ALERT)
        return out

    def _budget(self) -> float | None:
        """The budget the device's own tail is kept for: the residual's, else its one-reading
        breaks' (none: no tail)."""
        if self.false_alerts_per_day is not None:
            return self.false_alerts_per_day
        return self.shock_alerts_per_day

    def _own_bar(self, tail: StreamTail) -> float:
        """The deviate at which ``tail`` says the residual alerts (none without a budget or a
        history yet)."""
        budget = self._budget()
        if budget is None or tail.summary.weight < MIN_HISTORY:
            return math.inf
        return tail.threshold(budget, 1.0, 1, ALERT_Z)

    def _bar(self) -> float:
        """The deviate at which the residual alerts by the tail in force (:meth:`_judged_by`;
        none without a budget or a history yet)."""
        return self._judged_by()[1]

    def _judged_by(self) -> tuple[StreamTail, float]:
        """The tail the residual's statistic is judged by and the bar it sets: the device's own,
        and at any age the fleet's pooled tail (:meth:`borrow_tails`) once the pool knows its
        excursions, where the pool sets the higher bar or the device's own tail does not know
        its excursions yet (then at the higher of the two bars).

        Why: a break of one reading alone that the device's noise makes a few times a week (a
        meter's Student-t voltage, some 16 conditional deviations off its tie with the load) is
        an event a day of one device's history has seen once or not at all; its own tail cannot
        set the level such breaks pass at a budget of a few a year. A fleet of its kind has seen
        them by the hundred: the pooled tail knows how far they reach, as the level and seasonal
        members' pooled tails do (:mod:`~fleetwatch.fleet.tails`)."""
        own = self._own_bar(self.tail)
        pooled = self._fleet
        if pooled is None or not pooled.knows_excursions():
            return self.tail, own
        bar = self._own_bar(pooled)
        if self.tail.knows_excursions() and own >= bar:
            return self.tail, own
        # a bar the device's body extrapolates still holds; its tail's peaks are the pool's
        return pooled, bar if math.isinf(own) else max(bar, own)

    def _surprise(self, batch: Batch) -> FloatArray:
        return self._surprise_with(batch, None)

    def _surprise_with(self, batch: Batch, suspicion: FloatArray | None) -> FloatArray:
        model = self.model()
        if model is None or len(batch) == 0:
            return np.zeros(len(batch))
        inverse, _, complete, z, surprise, energy = self._residual(batch, model)
        own = None if suspicion is None else self._blame(batch, model, z, suspicion)[2]
        surprise = self._lasting(batch, model, surprise, energy, complete, own)
        out: FloatArray = np.maximum(surprise[inverse], 0.0)
        return out

    def _score(self, batch: Batch) -> Scores:
        return self._score_with(batch, None)

    def _score_with(self, batch: Batch, suspicion: FloatArray | None) -> Scores:
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        n = len(batch)
        model = self.model()
        if model is None or n == 0:
            nan = np.full(n, np.nan)
            reason = np.full(n, Reason.WARMUP, np.int8)
            return Scores.build(self.kind, np.zeros(n), names, batch.value, nan, nan, reason)
        inverse, matrix, complete, z, surprise, energy = self._residual(batch, model)
        pz, blame, own = self._blame(batch, model, z, suspicion)
        surprise = self._lasting(batch, model, surprise, energy, complete, own)
        diag = np.diag(model.precision)
        at = np.arange(blame.size)
        conditional = z[at, blame] - pz[at, blame] / diag[blame]
        expected = model.mean[blame] + model.std[blame] * conditional
        band = ALERT_Z * model.std[blame] / np.sqrt(diag[blame])
        reason = np.where(complete, Reason.PATTERN, Reason.WARMUP).astype(np.int8)
        metric_names = np.asarray(self.metrics, dtype=object)
        return Scores.build(
            self.kind,
            surprise[inverse],
            metric_names[blame][inverse],
            matrix[at, blame][inverse],
            expected[inverse],
            band[inverse],
            reason[inverse],
        )

    def _blame(
        self, batch: Batch, model: PcaModel, z: FloatArray, suspicion: FloatArray | None
    ) -> tuple[FloatArray, npt.NDArray[np.intp], FloatArray | None]:
        """Per event time (standardised vectors ``z``): ``z`` times the precision matrix, the
        metric a break is blamed on and, told ``suspicion``, the surprise that metric's own
        members found of its reading (``None`` without)."""
        pz = z @ model.precision
        # the log-likelihood ratio of "this metric alone moved": half the drop in the squared
        # Mahalanobis distance when it is corrected, and what its own members found of it
        evidence = pz**2 / np.diag(model.precision) / 2
        if suspicion is None:
            return pz, np.argmax(evidence, axis=1), None
        own = self._own_surprise(batch, suspicion, evidence.shape)
        blame = np.argmax(evidence + own, axis=1)
        return pz, blame, own[np.arange(blame.size), blame]

    def _own_surprise(
        self, batch: Batch, suspicion: FloatArray, shape: tuple[int, ...]
    ) -> FloatArray:
        """Per event time and metric (``shape``), the surprise its own members found of its
        reading (``suspicion`` per row; 0 where it has none)."""
        codes = batch.lookup(self.metrics)
        _, inverse = batch.times()
        own = np.zeros(shape)
        known = codes >= 0
        np.maximum.at(own, (inverse[known], codes[known]), suspicion[known])
        return own

    def _lasting(
        self,
        batch: Batch,
        model: PcaModel,
        surprise: FloatArray,
        energy: FloatArray,
        complete: npt.NDArray[np.bool_],
        own: FloatArray | None = None,
    ) -> FloatArray:
        """Per event time, the lasting evidence of a break (:mod:`~fleetwatch.models.lasting`)
        continuing from the readings before the batch: the scorer's memory of them, else
        :attr:`last`. Judged once per batch and model: :meth:`score` and :meth:`remember`.
        ``own``: per event time, what the blamed metric's own members found of its reading; a
        break of that reading alone counts only where they found it unusual too (see
        :meth:`_carry`)."""
        memo = self._memo
        if memo is not None and memo[0] is batch and memo[1] is model:
            carried = memo[2]
        else:
            carried = list(self._held) if self._held else list(self.last)
        unusual = None if own is None else own[complete] >= S_ALERT / 2
        out, after = self._carry(surprise[complete], energy[complete], carried, model, unusual)
        self._memo = (batch, model, carried, after)
        lasting_surprise = surprise.copy()
        lasting_surprise[complete] = out
        return lasting_surprise

    def _left(
        self, batch: Batch, model: PcaModel, matrix: FloatArray, complete: npt.NDArray[np.bool_]
    ) -> list[float]:
        """What ``batch`` leaves after :attr:`last` for the lasting evidence: as it was judged,
        when it was (the trainer's gate judged it), else from its last readings alone."""
        memo = self._memo
        if memo is not None and memo[0] is batch and memo[1] is model and memo[2] == self.last:
            return memo[3]
        rows = np.flatnonzero(complete)[-WINDOW:]
        energy = self._energy(self._standardised(matrix[rows], complete[rows], model), model)
        return self._carry(self._one_reading(energy, model), energy, self.last, model)[1]

    def _carry(
        self,
        surprise: FloatArray,
        energy: FloatArray,
        carried: list[float],
        model: PcaModel,
        unusual: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, list[float]]:
        """The lasting evidence of consecutive complete readings and what they leave.
        ``unusual`` (per reading): whether the blamed metric's own members found it at least
        calm-level unusual (``p ≤ 1e-3``, half the alert level's surprise); where they did
        not, a break of that reading alone is no evidence: a shock inside the metric's own
        tail is the metric's to judge (its members know its tail, the χ² model does not),
        and what the joint member adds of one reading is only where the others say it sits."""
        h = model.residual_var.size
        if not h:
            return surprise, carried
        single = None
        if self.false_alerts_per_day is None and self.shock_alerts_per_day is not None:
            single = self._shock(surprise, energy, h)
        if unusual is not None:
            single = np.where(unusual, surprise / SINGLE if single is None else single, 0.0)
        return lasting(
            surprise, energy, carried, h, window=self.false_alerts_per_day is None, single=single
        )

    def _shock(self, surprise: FloatArray, energy: FloatArray, h: int) -> FloatArray | None:
        """The evidence of a break of one reading alone: beyond doubt by the χ² model, and
        past what the device's one-reading breaks pass ``shock_alerts_per_day`` times a day by
        the tail in force (:meth:`_judged_by`; by the model alone until it knows its
        excursions)."""
        tail, bar = self._judged_by()
        if not tail.knows_excursions() or math.isinf(bar):
            return None
        wh = np.maximum(chi2_deviate(energy, h), 0.0)
        own = calibrated_surprise(tail, wh, bar, S_ALERT)
        out: FloatArray = np.minimum(surprise / SINGLE, own)
        return out

    def familiar_times(self, readings: Readings) -> set[int]:
        """The event times of ``readings`` whose reading the fleet knows: every metric within
        :attr:`bounds` and within one device's own ends (:attr:`states`: a state some device
        holds, not only a combination the pooled moments allow), and the metrics together as
        the pooled devices' are (the residual's surprise under the alert level). Empty without
        bounds or a fitted model."""
        batch = Batch.of(readings)
        model = self.model()
        if model is None or self.bounds is None or len(batch) == 0:
            return set()
        times, _, matrix = wide(batch, self.metrics)
        inside = ((matrix >= self.bounds[0]) & (matrix <= self.bounds[1])).all(axis=1)
        if self.states is not None:
            x = matrix[:, None, :]
            held = ((x >= self.states[0][None]) & (x <= self.states[1][None])).all(axis=2)
            inside &= held.any(axis=1)
        if not inside.any():
            return set()
        *_, surprise, _ = self._residual(batch, model)
        return {int(t) for t in times[inside & (surprise < S_ALERT)]}

    def learned_metrics(self) -> list[str]:
        return list(self.metrics)

    def borrow_tails(self, tails: Mapping[str, StreamTail]) -> None:
        self._fleet = tails.get(JOINT_TAIL)

    def own_tails(self) -> list[tuple[str, StreamTail, float]]:
        """The device's tail of the residual's statistic, under :data:`JOINT_TAIL`, with the
        bar it sets itself (none without a budget)."""
        if self._budget() is None:
            return []
        return [(JOINT_TAIL, self.tail, self._own_bar(self.tail))]

    def _state(self) -> dict[str, Any]:
        return {
            "metrics": list(self.metrics),
            "shift": floats(self.shift),
            "weight": self.weight,
            "sum": floats(self.sum),
            "scatter": floats(self.scatter),
            "count": self.count,
            "ref_ms": self.ref_ms,
            "grid": self.grid.state(),
            "last": self.last,
            # the tail is kept only where it is used (a budget): bins of zeros otherwise
            **({} if self._budget() is None else {"tail": self.tail.state()}),
            **({} if self.bounds is None else {"bounds": floats(self.bounds)}),
            **({} if self.states is None else {"states": floats(self.states)}),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self.metrics = [str(m) for m in state["metrics"]]
        d = len(self.metrics)
        self.shift = array(state, "shift", (len(state["shift"]),))
        self.weight = float(state["weight"])
        self.sum = array(state, "sum", (d,))
        self.scatter = array(state, "scatter", (d, d))
        self.count = int(state["count"])
        self.ref_ms = None if state["ref_ms"] is None else int(state["ref_ms"])
        self.bounds = array(state, "bounds", (2, d)) if "bounds" in state else None
        held = state.get("states")  # fleet models pooled before: none
        if held is None:
            self.states = None
        else:
            whole = isinstance(held, list) and len(held) == 2 and isinstance(held[0], list)
            rows = len(held[0]) if whole else -1  # not two lists of rows: refused below
            self.states = array(state, "states", (2, rows, d))
        self.grid = Grid.load(state.get("grid"), d)
        self.last = [float(v) for v in state.get("last", [])]  # parameters from before: none
        self._memo = None
        # parameters from before the device's own tail start one empty
        tail = state.get("tail")
        self.tail = (
            StreamTail(self.tail_halflife)
            if tail is None
            else StreamTail.load(self.tail_halflife, tail)
        )
        self._model = None
