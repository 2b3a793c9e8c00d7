"""The combined detector: every member's evidence as one calibrated score.

Each member reports a surprise ``s_i = -ln p_i`` for every row (see :mod:`calibration`). The
combined surprise is the largest, ``s = max_i s_i`` (the smallest p-value), mapped to [0, 1]
with the same function as every member. So the combined detector alerts exactly when some
member alerts, its score is strictly increasing in the strongest evidence (the ranking of
extreme anomalies survives; a noisy-OR of member scores would saturate at 1.0 as soon as two
members are confident), and by the union bound its false-alert rate per row is at most the sum
of the members' rates (``D · ALERT_P`` under their models). A Bonferroni correction
(``s - ln D``) would make ``p`` a valid p-value, but it would hide the CUSUM, whose sums are
reset as soon as they reach the common alert level and so never exceed it by ``ln D`` on a
small shift. With a ``device_budget`` the device decides once instead: every member's surprise
is mapped through one tail of the device's strongest evidence, which holds that budget for the
device as a whole (:mod:`~fleetwatch.models.device_tail`). The explanation of a row is that of
the most surprised member; a joint member (not per metric) is told what the per-metric members
found of each reading, for which metric it blames a break of its pattern on
(:meth:`~fleetwatch.models.base.Detector.score`'s ``suspicion``).

Members learn from the same batch with the same exclusion mask; when none is given, the combined
pre-batch alerts of the per-metric members are excluded from every member, so a spike seen by one
detector does not leak into the others' statistics (the joint member's alerts alone exclude
nothing: a reading normal metric by metric is learned). Except for a lasting change of the whole
device: once every metric has alerted on every reading for ``adapt_s`` seconds of event time, the
readings are learned again, alerts and all, for another ``adapt_s``. A machine that stops or starts
moves all its signals at once and stays so for many minutes; it becomes one of the device's normal
states (alerted on when first seen, then learned) instead of alerting until it ends. A single
metric off on its own — a failing sensor, however long — stays out. ``None`` never adapts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fleetwatch.models.base import Detector, Readings, ScoringMemory, detector_class
from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import ALERT_SCORE, score_from_surprise
from fleetwatch.models.device_tail import DeviceTail
from fleetwatch.models.errors import HyperParameterError, ParamsError, require_positive
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.level import NEW_NORMAL_AFTER_S, LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.params import check_header
from fleetwatch.models.scores import Scores
from fleetwatch.models.seasonal import SeasonalBaseline


def default_members(
    false_alerts_per_day: float = 1.0, new_normal_after_s: float | None = NEW_NORMAL_AFTER_S
) -> list[Detector]:
    """The default members; the seasonal and the level member are each held to the device's
    budget of false alerts a day (each of the device's metrics has its share of it), so on
    normal data the device opens up to twice as many: each member's whole budget keeps the
    faults near its threshold that a halved share would give up. The PCA member keeps its χ²
    model for lasting breaks (on Gaussian noise a tail of its own only raises its threshold,
    see :mod:`~fleetwatch.models.multivariate`); a break of one reading alone is also
    held to the device's own tail of them (``shock_alerts_per_day``, the device's budget): a
    meter's Student-t voltage breaks its loose tie with the load "beyond doubt" several times a
    day. A metric's shift is its new normal after ``new_normal_after_s`` (the level member's
    ``adopt_s``)."""
    return [
        SeasonalBaseline(false_alerts_per_day=false_alerts_per_day),
        LevelShiftDetector(false_alerts_per_day=false_alerts_per_day, adopt_s=new_normal_after_s),
        FlatlineDetector(),
        PcaDetector(shock_alerts_per_day=false_alerts_per_day),
    ]


class CombinedDetector(Detector):
    kind: ClassVar[str] = "combined"
    per_metric: ClassVar[bool] = False

    def __init__(
        self,
        detectors: Sequence[Detector] | None = None,
        adapt_s: float | None = 300.0,
        device_budget: float | None = None,
    ) -> None:
        self.detectors: list[Detector] = default_members() if detectors is None else list(detectors)
        if not self.detectors:
            raise HyperParameterError("a combined detector needs at least one member")
        self.adapt_s = adapt_s
        self.device_budget = device_budget
        require_positive(self, "adapt_s", "device_budget", or_none=True)
        self._memory = _tail_memory(self.detectors) if device_budget is not None else 0.0
        self.device_tail = (
            None if device_budget is None else DeviceTail(device_budget, self._memory)
        )
        """The device's one decision (:mod:`~fleetwatch.models.device_tail`), held to
        ``device_budget`` false alerts a day; ``None``: each member decides on its own."""
        self.alerting: dict[str, int] = {}
        """Metric → event time since which every reading of it alerted (the gate's memory)."""
        self.adapting_until: int | None = None
        """Event time until which a device that moved as a whole is learned, alerts and all."""
        self._scored: tuple[Batch, int, list[npt.NDArray[np.float64]]] | None = None
        """The last batch scored, the version it was scored with and each member's surprise."""

    def hyper_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "detectors": [{"kind": d.kind, "hyper": d.hyper_json()} for d in self.detectors],
            "adapt_s": self.adapt_s,
        }
        if self.device_budget is not None:  # parameters without it read as before
            out["device_budget"] = self.device_budget
        return out

    @classmethod
    def from_hyper(cls, hyper: Mapping[str, Any]) -> CombinedDetector:
        try:
            specs = list(hyper["detectors"])
            members = [detector_class(s["kind"]).from_hyper(s["hyper"]) for s in specs]
            adapt = hyper.get("adapt_s", 300.0)
            budget = hyper.get("device_budget")
            return cls(
                members,
                None if adapt is None else float(adapt),
                None if budget is None else float(budget),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HyperParameterError(f"bad combined hyperparameters {dict(hyper)!r}") from exc

    def _gate(self, batch: Batch) -> npt.NDArray[np.bool_]:
        """The pre-batch alerts of the per-metric members are left out (a reading that only the
        joint member alerts on is learned: were it kept out, a metric that wanders on its own —
        a temperature — would stay an alert of the joint model for as long as it wanders, while
        its own members judge it normal), but for a device in a lasting new state: a row is learned
        once every metric of the batch has alerted without a break for ``adapt_s``, each on its
        own, and from then on for another ``adapt_s``: the members take in the new state at their
        own pace. One metric off on its own is a fault of that sensor, and stays out, as does any
        lasting change of a device of one metric. "Every metric" is every metric the device has:
        one a batch lacks keeps its streak from earlier batches. With no per-metric member, the
        joint member's alerts are left out."""
        each = self._surprises(batch)
        self._scored = (batch, self.version, each)  # the device's tail learns from them too
        own = [s for m, s in zip(self.detectors, each, strict=True) if m.per_metric]
        # what keeps a reading out is a per-metric member's alert: the joint member's alone
        # does not (with no per-metric member, it does)
        alerts = score_from_surprise(np.max(own or each, axis=0)) >= ALERT_SCORE
        keep: npt.NDArray[np.bool_] = ~alerts
        if self.adapt_s is None or (not alerts.any() and not self.alerting):
            self.alerting.clear()
            return keep
        known = dict.fromkeys([*self.learned_metrics(), *batch.names])
        if len(known) < 2:
            self.alerting.clear()
            return keep
        limit = self.adapt_s * 1000.0
        until = self.adapting_until
        since: dict[str, int | None] = {name: self.alerting.get(name) for name in known}
        rows = zip(batch.codes.tolist(), batch.event_ms.tolist(), strict=True)
        for i, (code, t) in enumerate(rows):
            name = batch.names[code]
            if not alerts[i]:
                since[name] = None
                continue
            if since[name] is None:
                since[name] = t
            if all(s is not None and t - s >= limit for s in since.values()):
                until = max(until or 0, t + int(limit))
            keep[i] = until is not None and t <= until
        self.alerting = {m: s for m, s in since.items() if s is not None}
        self.adapting_until = until
        return keep

    def members(self) -> list[Detector]:
        return list(self.detectors)

    @property
    def lookback(self) -> int:
        return max((member.lookback for member in self.detectors), default=0)

    @property
    def reports_dropouts(self) -> bool:
        return any(member.reports_dropouts for member in self.detectors)

    def resume(self, memory: ScoringMemory) -> None:
        self._scored = None
        for member in self.detectors:
            member.resume(memory)

    def remember(self, readings: Readings, memory: ScoringMemory) -> None:
        for member in self.detectors:
            member.remember(readings, memory)

    def familiar_times(self, readings: Readings) -> set[int]:
        return set().union(*(member.familiar_times(readings) for member in self.detectors))

    def learned_metrics(self) -> list[str]:
        names: dict[str, None] = {}
        for member in self.detectors:
            names.update(dict.fromkeys(member.learned_metrics()))
        return list(names)

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        if self.device_tail is not None:  # judged with the parameters before the batch
            streams = sum(
                len(m.learned_metrics() or batch.names) if m.per_metric else 1
                for m in self.detectors
            )
            self.device_tail.learn(batch.event_ms, self._surprises(batch), keep, streams)
        for member in self.detectors:
            member._learn_batch(batch, keep)

    def _score(self, batch: Batch) -> Scores:
        own = [m._score(batch) if m.per_metric else None for m in self.detectors]
        found = [s.surprise for s in own if s is not None]
        suspicion = np.max(found, axis=0) if found else None  # none scored: not told
        each = [
            s if s is not None else m._score_with(batch, suspicion)
            for m, s in zip(self.detectors, own, strict=True)
        ]
        surprise = np.stack([s.surprise for s in each])
        self._scored = (batch, self.version, list(surprise))
        if self.device_tail is not None:
            surprise = self.device_tail.calibrate(surprise)
        best = np.argmax(surprise, axis=0)[None, :]
        combined = np.take_along_axis(surprise, best, 0)[0]

        def pick(field: str) -> Any:
            return np.take_along_axis(np.stack([getattr(s, field) for s in each]), best, 0)[0]

        return Scores(
            score_from_surprise(combined),
            combined,
            pick("metric"),
            pick("observed"),
            pick("expected"),
            pick("band"),
            pick("reason"),
            pick("detector"),
        )

    def _surprise(self, batch: Batch) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = np.max(self._surprises(batch), axis=0)
        return out if self.device_tail is None else self.device_tail.calibrate(out)

    def _surprises(self, batch: Batch) -> list[npt.NDArray[np.float64]]:
        """Each member's surprise on ``batch``, the joint members told the per-metric members'
        as in :meth:`_score`: those of the last :meth:`_score` when it was of this batch with
        these parameters (a batch scored, then learned, is judged once)."""
        seen = self._scored
        if seen is not None and seen[0] is batch and seen[1] == self.version:
            return seen[2]
        own = [m._surprise(batch) if m.per_metric else None for m in self.detectors]
        found = [s for s in own if s is not None]
        suspicion = np.max(found, axis=0) if found else None  # none scored: not told
        return [
            s if s is not None else m._surprise_with(batch, suspicion)
            for m, s in zip(self.detectors, own, strict=True)
        ]

    def _state(self) -> dict[str, Any]:
        members = [member.to_params() for member in self.detectors]
        return {
            "members": members,
            "alerting": dict(sorted(self.alerting.items())),
            "adapting_until": self.adapting_until,
            **({} if self.device_tail is None else {"device_tail": self.device_tail.state()}),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._scored = None
        self.alerting = {str(m): int(t) for m, t in state.get("alerting", {}).items()}
        until = state.get("adapting_until")
        self.adapting_until = None if until is None else int(until)
        if self.device_budget is not None:
            tail = state.get("device_tail")
            self.device_tail = (
                DeviceTail(self.device_budget, self._memory)
                if tail is None
                else DeviceTail.load(self.device_budget, self._memory, tail)
            )
        members = list(state["members"])
        if len(members) != len(self.detectors):
            raise ParamsError(f"{len(members)} member parameters for {len(self.detectors)} members")
        self.detectors = [_member(d, p) for d, p in zip(self.detectors, members, strict=True)]


def _tail_memory(members: Sequence[Detector]) -> float:
    """The longest tail memory (``tail_halflife``, readings) among ``members``: what the device's
    own tail remembers. A device decision needs a member with a tail of its own."""
    memory = max(
        (float(m.hyperparameters().get("tail_halflife", 0.0)) for m in members), default=0.0
    )
    if not memory > 0:
        raise HyperParameterError("device_budget needs a member with a tail (tail_halflife)")
    return memory


def device_tail_of(detector: Detector | None) -> DeviceTail | None:
    """The device's one decision, when its detector makes one (a combined detector with a
    ``device_budget``)."""
    return detector.device_tail if isinstance(detector, CombinedDetector) else None


def _member(built: Detector, params: Mapping[str, Any]) -> Detector:
    """A member from its parameters, reusing the one built from the combined hyperparameters
    when the parameters have the same (the usual case: no second construction)."""
    if not isinstance(params, Mapping) or params.get("hyper") != built.hyper_json():
        return type(built).from_params(params)
    check_header(params, built.kind, built.schema)
    built._restore(params)
    return built
