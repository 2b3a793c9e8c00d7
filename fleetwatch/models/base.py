"""The detector interface: learn from a batch, score a batch, parameters in and out.

In the style of river's estimators, kept to a few methods:

- ``learn(readings, exclude=None)`` updates the parameters from one batch of one device's
  readings, starting from the current parameters (never refitting on all history), bumps
  ``version`` and widens ``trained_from_ms`` / ``trained_to_ms``;
- ``score(readings)`` scores a batch with the current parameters (it does not learn) and
  returns :class:`~fleetwatch.models.scores.Scores`, one per input row;
- ``to_params()`` / ``from_params()`` turn a detector into a small JSON-able dict and back;
- hyperparameters are exactly the constructor arguments (``hyperparameters()`` reads them
  back; a detector refuses bad ones with :class:`~fleetwatch.models.errors.HyperParameterError`),
  and ``clone()`` gives a fresh, unfitted detector with the same ones.

A batch is scored as the continuation of the data learned so far: detectors with memory
(the CUSUM sums, the last readings of a flat-line window, the last event time) carry it in
their parameters. The streaming order for one device is therefore ``score(batch)`` then
``learn(batch, exclude=scores.alert)``.

Training on anomalies. ``exclude`` is a per-row boolean mask of readings to keep out of the
learned statistics (the detector still advances its memory through them), so a long fault
does not become the new normal. When ``exclude`` is ``None`` — as the trainer calls it — a
fitted detector gates itself: rows it scores as alerts with its parameters before the batch are
left out (the combined detector lets a device of two or more metrics back in once every metric
it has has alerted without a break for ``adapt_s`` of event time: a machine's new operating
state is learned, not excluded for ever; see :mod:`combiner`).

Scoring as a continuation. The scorer scores a device's readings batch by batch with parameters
the trainer published some batches ago, so it keeps its own, newer copy of what a detector with
memory carries (a :class:`ScoringMemory`): :meth:`Detector.resume` has a detector score the
next batch as the continuation of that memory rather than of its parameters, and
:meth:`Detector.remember` moves the memory on past the batch. :attr:`Detector.lookback` says how
many of each metric's latest values the memory must hold for it.

Every concrete subclass with a ``kind`` is registered here; see :mod:`registry`.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import ALERT_SCORE, score_from_surprise
from fleetwatch.models.errors import BatchError, HyperParameterError, ParamsError, UnknownDetector
from fleetwatch.models.params import check_header
from fleetwatch.models.scores import Scores
from fleetwatch.models.tail import StreamTail

Readings = pd.DataFrame | Batch

_KINDS: dict[str, type[Detector]] = {}


@dataclass
class ScoringMemory:
    """What the scorer keeps of one device's in-order readings between its batches, for the
    detectors whose score of a row depends on the readings before it (see :meth:`Detector.resume`).
    The dicts are the caller's (the scorer's device state) and are updated in place."""

    since_ms: int | None = None
    """The event time the device was last heard from: where the gap before the next reading is
    measured from (``None``: nowhere, no gap is scored)."""
    recent: dict[str, list[float]] = field(default_factory=dict)
    """Metric → the values of its latest readings, oldest first (the longest
    :attr:`Detector.lookback` of the device's detectors)."""
    trends: dict[str, list[float]] = field(default_factory=dict)
    """Metric → the carried sums of its local line after those readings
    (:mod:`~fleetwatch.models.trend`)."""
    levels: dict[str, list[float]] = field(default_factory=dict)
    """Metric → what the level detector's average carries past those readings: the average,
    its alert under way and its last reading's side (:data:`~fleetwatch.models.level.CARRY`)."""
    joint: list[float] = field(default_factory=list)
    """What the joint member's evidence of a lasting break carries on from those readings (the
    surprise at the last with every metric and the capped residual energies before it,
    :mod:`~fleetwatch.models.lasting`); empty: none yet."""


class Detector(ABC):
    kind: ClassVar[str]
    schema: ClassVar[int] = 1
    per_metric: ClassVar[bool] = True
    """Whether a row's score is about its own metric (not the device's metrics together)."""

    version: int = 0
    trained_from_ms: int | None = None
    trained_to_ms: int | None = None

    def learned_metrics(self) -> list[str]:
        """The metrics this detector has learned anything of, in the order first seen."""
        return []

    def members(self) -> list[Detector]:
        """The detectors whose scores this one gives: itself, or a combination's members."""
        return [self]

    # -- what the scorer asks of a detector --------------------------------------------------

    @property
    def lookback(self) -> int:
        """How many of a metric's values before a row its score depends on (0: none): what the
        scorer keeps per metric in :attr:`ScoringMemory.recent` for it."""
        return 0

    @property
    def reports_dropouts(self) -> bool:
        """Whether its scores include gaps between readings (rows of reason
        :attr:`~fleetwatch.models.scores.Reason.DROPOUT`; its other rows are calm on that)."""
        return False

    @property
    def poolable(self) -> bool:
        """Whether the devices of a scope pool this kind into one fleet model, which can score
        in place of a device's own (the scope's champion)."""
        return False

    @property
    def warmed_up(self) -> bool:
        """Whether it scores anything yet (a detector past its warm-up)."""
        return self.fitted

    def resume(self, memory: ScoringMemory) -> None:
        """Score the next batch as the continuation of ``memory`` (the scorer's, newer than the
        parameters' own); an empty memory: of the parameters alone, never of an earlier call.
        Nothing to do for a detector without memory."""
        return None

    def borrow_tails(self, tails: Mapping[str, StreamTail]) -> None:
        """Hold a stream no less strictly than its metric's tail pooled over the fleet,
        ``tails`` (:mod:`~fleetwatch.fleet.tails`; empty: none): a young one at least,
        until its own excursions set its threshold. Nothing to do for a detector without such
        tails."""
        return None

    def own_tails(self) -> list[tuple[str, StreamTail, float]]:
        """Per metric whose scored statistic has a tail of its own: the metric, its tail and
        the threshold that tail sets in force, for the fleet's pool
        (:mod:`~fleetwatch.fleet.tails`). Empty for a detector without such tails."""
        return []

    def remember(self, readings: Readings, memory: ScoringMemory) -> None:
        """Move ``memory`` on past ``readings``, just scored after :meth:`resume` (the values of
        :attr:`ScoringMemory.recent` are the caller's to keep)."""
        return None

    def familiar_times(self, readings: Readings) -> set[int]:
        """The event times of ``readings`` whose reading is a state this detector knows as
        normal for the device as a whole (a fleet model: a state some device of the scope
        holds). Empty unless a detector can tell."""
        return set()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__ and not inspect.isabstract(cls):
            _KINDS[cls.kind] = cls

    # -- hyperparameters ---------------------------------------------------------------------

    def hyperparameters(self) -> dict[str, Any]:
        """The constructor arguments, read back from the attributes of the same names."""
        return {name: getattr(self, name) for name in _hyper_names(type(self))}

    def hyper_json(self) -> dict[str, Any]:
        """:meth:`hyperparameters` in JSON form (the same unless a subclass nests detectors)."""
        return self.hyperparameters()

    @classmethod
    def from_hyper(cls, hyper: Mapping[str, Any]) -> Self:
        try:
            return cls(**hyper)
        except TypeError as exc:
            raise HyperParameterError(
                f"bad {cls.kind} hyperparameters {dict(hyper)!r}: {exc}"
            ) from exc

    def clone(self) -> Self:
        """A fresh, unfitted detector with the same hyperparameters."""
        return type(self).from_hyper(self.hyper_json())

    @property
    def fitted(self) -> bool:
        return self.version > 0

    # -- learning and scoring ----------------------------------------------------------------

    def learn(self, readings: Readings, exclude: npt.ArrayLike | None = None) -> Self:
        """Update from one batch of one device's readings; ``exclude`` marks rows (in the
        caller's order) to keep out of the statistics. Returns ``self``."""
        batch = Batch.of(readings)
        if len(batch) == 0:
            return self
        if exclude is None:
            keep = self._gate(batch) if self.fitted else np.ones(len(batch), bool)
        else:
            mask = np.asarray(exclude, dtype=bool)
            if mask.shape != (len(batch),):
                raise BatchError(f"exclude has shape {mask.shape}, the batch {len(batch)} rows")
            keep = ~batch.sorted_like(mask)
        self._learn_batch(batch, keep)
        return self

    def score(self, readings: Readings, suspicion: npt.ArrayLike | None = None) -> Scores:
        """Score a batch with the current parameters; one score per input row, in input order.
        ``suspicion`` (per input row, in its order): how surprising the per-metric members find
        the row's reading on its own, for a joint detector's explanation (:meth:`_score_with`)."""
        batch = Batch.of(readings)
        if suspicion is None or self.per_metric:
            scores = self._score(batch)
        else:
            own = np.asarray(suspicion, dtype=float)
            if own.shape != (len(batch),):
                raise BatchError(f"suspicion has shape {own.shape}, the batch {len(batch)} rows")
            scores = self._score_with(batch, batch.sorted_like(own))
        return scores if batch.order is None else scores.take(np.argsort(batch.order))

    def _learn_batch(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        self._learn(batch, keep)
        lo, hi = int(batch.event_ms[0]), int(batch.event_ms[-1])
        self.trained_from_ms = lo if self.trained_from_ms is None else min(lo, self.trained_from_ms)
        self.trained_to_ms = hi if self.trained_to_ms is None else max(hi, self.trained_to_ms)
        self.version += 1

    @abstractmethod
    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        """Update the state from a sorted batch (``keep`` marks rows that may be learned)."""

    @abstractmethod
    def _score(self, batch: Batch) -> Scores:
        """Scores in the batch's (sorted) row order."""

    def _score_with(self, batch: Batch, suspicion: npt.NDArray[np.float64] | None) -> Scores:
        """:meth:`_score`, for a detector of the device's metrics together (not
        :attr:`per_metric`), told per row how surprising its metric's own members find it
        (sorted row order; ``None``: no per-metric member scored, nothing told): which metric
        a break of the joint pattern is blamed on may follow it. Per-metric detectors have
        nothing to blame and ignore it."""
        return self._score(batch)

    def _surprise(self, batch: Batch) -> npt.NDArray[np.float64]:
        """``_score(batch).surprise`` alone (sorted row order). Detectors override it with a
        path that skips the explanation fields: the self-gate of :meth:`learn` needs only this."""
        return self._score(batch).surprise

    def _surprise_with(
        self, batch: Batch, suspicion: npt.NDArray[np.float64] | None
    ) -> npt.NDArray[np.float64]:
        """:meth:`_surprise`, told ``suspicion`` as :meth:`_score_with` is (per-metric
        detectors ignore it)."""
        return self._surprise(batch)

    def _gate(self, batch: Batch) -> npt.NDArray[np.bool_]:
        """The rows a fitted detector learns when the caller says nothing: those it does not
        alert on with its parameters before the batch."""
        keep: npt.NDArray[np.bool_] = ~self._alerts(batch)
        return keep

    def _alerts(self, batch: Batch) -> npt.NDArray[np.bool_]:
        """``_score(batch).alert``, from :meth:`_surprise` (the same calibration, so the same
        rows: what the scorer flags with these parameters)."""
        alert: npt.NDArray[np.bool_] = score_from_surprise(self._surprise(batch)) >= ALERT_SCORE
        return alert

    # -- parameters --------------------------------------------------------------------------

    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """The learned state as JSON-able values."""

    @abstractmethod
    def _load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`_state` wrote."""

    def to_params(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "schema": self.schema,
            "version": self.version,
            "trained_from_ms": self.trained_from_ms,
            "trained_to_ms": self.trained_to_ms,
            "hyper": self.hyper_json(),
            "state": self._state(),
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        check_header(params, cls.kind, cls.schema)
        detector = cls.from_hyper(params["hyper"])
        detector._restore(params)
        return detector

    def _restore(self, params: Mapping[str, Any]) -> None:
        """Load the state and header of parameters already checked to be of this kind and
        of these hyperparameters."""
        try:
            self._load_state(params["state"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ParamsError(f"bad {self.kind} state: {exc}") from exc
        self.version = int(params["version"])
        lo, hi = params["trained_from_ms"], params["trained_to_ms"]
        self.trained_from_ms = None if lo is None else int(lo)
        self.trained_to_ms = None if hi is None else int(hi)


@cache
def _hyper_names(cls: type[Detector]) -> tuple[str, ...]:
    """The constructor's argument names (read once per class: ``inspect`` is slow)."""
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")


def detector_class(kind: str) -> type[Detector]:
    try:
        return _KINDS[kind]
    except KeyError:
        raise UnknownDetector(f"unknown detector kind {kind!r}; known: {sorted(_KINDS)}") from None


def registered_kinds() -> dict[str, type[Detector]]:
    return dict(_KINDS)


def load_params(params: Mapping[str, Any]) -> Detector:
    """Any registered detector from its parameters (dispatch on ``kind``)."""
    if "kind" not in params:
        raise ParamsError("parameters have no 'kind'")
    return detector_class(str(params["kind"])).from_params(params)
