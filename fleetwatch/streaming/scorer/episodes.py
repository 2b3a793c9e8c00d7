"""The alert lifecycle of one device, pure: scored readings in, alert events out.

An *episode* is keyed by metric and detector kind; a joint kind's (:data:`JOINT`: a verdict on
the whole reading, named after the metric it blames) by its kind alone while it is under way, so
a break whose blame moves between metrics is one episode, named after the metric it opened on.
Per key, in event time, each reading counted once (a joint kind reports a reading once per
metric row)::

    idle ──anomalous──▶ pending ──(min_readings anomalous)──▶ open ──▶ update* ──▶ resolve
                           │                                    │
                           └──calm──▶ idle (nothing emitted)    └──gap filled late──▶ withdraw

- *anomalous*: score at or above the alert level (``ALERT_SCORE``, p ≤ 1e-6);
- *calm*: score below :data:`CALM_SCORE` (p > 1e-3). Between the two a reading neither feeds
  nor clears an episode: that band is the hysteresis which keeps a signal hovering at the alert
  level from opening and resolving over and over;
- an open episode resolves after ``clear_readings`` calm readings in a row (its ``end_ms`` is
  the last anomalous reading); ``update`` is emitted only when the severity rises or the peak
  score grows by :data:`UPDATE_STEP`, so a long episode is a handful of events, not one per
  reading;
- *withdraw*: a dropout episode (a gap between readings) whose gap is filled by readings that
  arrive late, within the allowed lateness, is withdrawn — it was never an anomaly;
- a device that falls silent (its session ends) resolves its open episodes.

The episode id is :func:`~fleetwatch.contracts.alerts.alert_id` of device, metric, kind and the
event time of the first anomalous reading: scoring the same readings again (a restart, a replay)
gives the same ids and revisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from itertools import pairwise
from typing import Any

from fleetwatch.contracts.alerts import Severity, alert_id, event_id
from fleetwatch.models.calibration import ALERT_SCORE, S_ALERT, score_from_surprise
from fleetwatch.models.registry import KINDS
from fleetwatch.streaming.scorer.device_state import DeviceScoringState

CALM_SCORE = float(score_from_surprise(S_ALERT / 2))
"""Below this a reading is calm (p > 1e-3)."""
CRITICAL_SCORE = float(score_from_surprise(2 * S_ALERT))
"""At or above this an episode is critical (p ≤ 1e-12)."""
UPDATE_STEP = 0.05
DROPOUT = "dropout"
JOINT = frozenset(kind for kind, cls in KINDS.items() if not cls.per_metric)
"""Detector kinds whose verdict is about a whole reading, named after the metric it blames."""


def severity_of(score: float) -> Severity:
    return "critical" if score >= CRITICAL_SCORE else "warning"


@dataclass(frozen=True)
class Observation:
    """One scored (reading, metric) for one detector kind."""

    metric: str
    kind: str
    score: float
    seq: int
    event_ms: int
    received_ms: int
    value: float
    expected: float
    band: float
    reason: str
    gap_from_ms: int | None = None
    """For a dropout: the event time of the reading before the gap."""
    model: str | None = None
    """The fleet model (``name/version``) that scored it, when not the device's own."""
    provisional: bool = False
    """Judged while its stream's own tail was still short (:data:`Reason.EARLY`): a young
    stream's provisional threshold."""


@dataclass
class Episode:
    alert_id: str
    metric: str
    kind: str
    start_ms: int
    last_bad_ms: int
    bad: int = 1
    calm: int = 0
    opened: bool = False
    revision: int = -1
    severity: Severity = "warning"
    peak: float = 0.0
    gap_from_ms: int | None = None
    gap_limit_ms: float | None = None
    filled: list[int] = field(default_factory=list)
    """Event times of late readings inside the gap (a dropout episode)."""
    heard: int = -1
    """The ``seq`` of the latest reading it counted: a joint kind reports a reading once per
    metric row, and a reading counts once."""

    @property
    def key(self) -> str:
        return f"{self.metric}\x1f{self.kind}"


_FIELDS = tuple(f.name for f in fields(Episode))


def _row(episode: Episode) -> dict[str, Any]:
    """An episode as the state keeps it: ``dataclasses.asdict`` of its flat fields, without
    that function's recursive walk over every value."""
    row = {name: getattr(episode, name) for name in _FIELDS}
    row["filled"] = list(episode.filled)
    return row


class Lifecycle:
    """The episodes of one device. ``episodes`` round-trips through :meth:`dump` / :meth:`load`
    (the scorer keeps it in its state store between micro-batches)."""

    def __init__(
        self,
        device_id: str,
        params_version: int,
        now_ms: int,
        min_readings: int = 1,
        clear_readings: int = 3,
        episodes: dict[str, Episode] | None = None,
    ) -> None:
        self.device_id = device_id
        self.params_version = params_version
        self.now_ms = now_ms
        self.min_readings = min_readings
        self.clear_readings = clear_readings
        self.episodes: dict[str, Episode] = episodes or {}
        self.events: list[dict[str, Any]] = []

    # -- state -------------------------------------------------------------------------------

    def dump(self) -> list[dict[str, Any]]:
        return [_row(e) for e in self.episodes.values()]

    @staticmethod
    def load(rows: list[dict[str, Any]] | None) -> dict[str, Episode]:
        episodes = [Episode(**row) for row in rows or []]
        return {e.key: e for e in episodes}

    @property
    def open_ids(self) -> list[str]:
        return sorted(e.alert_id for e in self.episodes.values() if e.opened)

    # -- observations ------------------------------------------------------------------------

    def follow(self, observations: Iterable[Observation]) -> None:
        """In-order observations, in event-time order."""
        for obs in observations:
            self.observe(obs)

    def follow_late(self, observations: Iterable[Observation]) -> None:
        """Out-of-order observations (:meth:`observe_late`), in event-time order."""
        for obs in observations:
            self.observe_late(obs)

    def late_readings(
        self, seqs: Iterable[Any], event_ms: Iterable[Any], received_ms: Iterable[Any]
    ) -> None:
        """Readings that arrived out of order (one row per metric), each once and in order:
        :meth:`late_reading`."""
        arrivals = zip(seqs, event_ms, received_ms, strict=True)
        for seq, ev, rx in sorted({(int(a), int(b), int(c)) for a, b, c in arrivals}):
            self.late_reading(seq, ev, rx)

    def keys_heard(self, metrics: Iterable[str]) -> set[str]:
        """The keys whose calm rows the lifecycle needs, among readings of ``metrics``: its
        episodes', and every metric's of a joint kind with an episode under way (:meth:`key`)."""
        joint = {e.kind for e in self.episodes.values() if e.kind in JOINT}
        return set(self.episodes) | {f"{m}\x1f{k}" for k in joint for m in metrics}

    def key(self, obs: Observation) -> str:
        """The episode ``obs`` belongs to: its metric's and kind's. A joint kind's reading
        continues its kind's episode under way whatever metric it blames: the blame may move
        between metrics while one break lasts, and an episode named after a metric no longer
        blamed would hear no reading and stay open after the break."""
        key = f"{obs.metric}\x1f{obs.kind}"
        if obs.kind in JOINT and key not in self.episodes:
            return next((k for k, e in self.episodes.items() if e.kind == obs.kind), key)
        return key

    def observe(self, obs: Observation) -> None:
        """An in-order observation."""
        key = self.key(obs)
        episode = self.episodes.get(key)
        if episode is not None and obs.seq == episode.heard:
            return
        if obs.score >= ALERT_SCORE:
            if episode is None:
                episode = Episode(
                    alert_id(self.device_id, obs.metric, obs.kind, obs.event_ms),
                    obs.metric,
                    obs.kind,
                    start_ms=obs.event_ms,
                    last_bad_ms=obs.event_ms,
                    peak=obs.score,
                    gap_from_ms=obs.gap_from_ms,
                    gap_limit_ms=obs.band if obs.kind == DROPOUT else None,
                    heard=obs.seq,
                )
                self.episodes[key] = episode
            else:
                episode.heard = obs.seq
                episode.bad += 1
                episode.calm = 0
                episode.last_bad_ms = max(episode.last_bad_ms, obs.event_ms)
            if not episode.opened:
                if episode.bad >= self.min_readings:
                    episode.opened = True
                    episode.peak = obs.score
                    episode.severity = severity_of(obs.score)
                    self._emit(episode, "open", obs)
                return
            severity = severity_of(obs.score)
            if severity != episode.severity and severity == "critical":
                episode.severity = severity
                episode.peak = max(episode.peak, obs.score)
                self._emit(episode, "update", obs)
            elif obs.score >= episode.peak + UPDATE_STEP:
                episode.peak = obs.score
                self._emit(episode, "update", obs)
        elif obs.score < CALM_SCORE and episode is not None:
            if not episode.opened:
                del self.episodes[key]
                return
            episode.heard = obs.seq
            episode.calm += 1
            if episode.calm >= self.clear_readings:
                del self.episodes[key]
                self._emit(episode, "resolve", obs, end_ms=episode.last_bad_ms)
        elif episode is not None:
            episode.heard = obs.seq
            episode.calm = 0

    def late_reading(self, seq: int, event_ms: int, received_ms: int) -> None:
        """A reading arrived out of order (within the allowed lateness): it may fill the gap
        of a dropout episode, which is then withdrawn once no gap over the limit is left."""
        for episode in list(self.episodes.values()):
            if (
                episode.kind == DROPOUT
                and episode.gap_from_ms is not None
                and episode.gap_from_ms < event_ms < episode.start_ms
            ):
                nan = float("nan")
                obs = Observation("*", DROPOUT, 0.0, seq, event_ms, received_ms, nan, nan, nan, "")
                self._refill(episode, obs)

    def observe_late(self, obs: Observation) -> None:
        """An anomalous out-of-order observation: it extends an open episode of its key
        backwards (an ``update`` with the earlier start), or opens one."""
        if obs.kind == DROPOUT or obs.score < ALERT_SCORE:
            return
        episode = self.episodes.get(self.key(obs))
        if episode is None:
            self.observe(obs)
            return
        episode.bad += 1
        if episode.opened and obs.event_ms < episode.start_ms:
            episode.start_ms = obs.event_ms
            self._emit(episode, "update", obs)

    def _refill(self, episode: Episode, obs: Observation) -> None:
        assert episode.gap_from_ms is not None
        episode.filled = sorted({*episode.filled, obs.event_ms})
        times = [episode.gap_from_ms, *episode.filled, episode.start_ms]
        widest = max(b - a for a, b in pairwise(times))
        limit = episode.gap_limit_ms or 0.0
        if widest > limit:
            return
        del self.episodes[episode.key]
        if episode.opened:
            obs = Observation(
                episode.metric,
                DROPOUT,
                0.0,
                obs.seq,
                obs.event_ms,
                obs.received_ms,
                float("nan"),
                float("nan"),
                limit,
                "the gap was filled by readings that arrived late",
            )
            self._emit(episode, "withdraw", obs, end_ms=obs.event_ms)

    def silent(self, last_seen_ms: int, seq: int, received_ms: int) -> None:
        """The device stopped sending: open episodes resolve, pending ones are dropped."""
        for episode in list(self.episodes.values()):
            del self.episodes[episode.key]
            if episode.opened:
                obs = Observation(
                    episode.metric,
                    episode.kind,
                    0.0,
                    seq,
                    last_seen_ms,
                    received_ms,
                    float("nan"),
                    float("nan"),
                    float("nan"),
                    "the device went silent",
                )
                self._emit(episode, "resolve", obs, end_ms=episode.last_bad_ms)

    def _emit(
        self, episode: Episode, status: str, obs: Observation, end_ms: int | None = None
    ) -> None:
        episode.revision += 1
        self.events.append(
            {
                "alert_id": episode.alert_id,
                "event_id": event_id(episode.alert_id, episode.revision),
                "device_id": self.device_id,
                "metric": episode.metric,
                "status": status,
                "detector": episode.kind,
                "params_version": self.params_version,
                "seq": obs.seq,
                "event_ms": obs.event_ms,
                "received_ms": obs.received_ms,
                "detected_ms": self.now_ms,
                "value": _finite(obs.value),
                "expected": _finite(obs.expected),
                "band": _finite(obs.band),
                "score": obs.score,
                "reason": obs.reason,
                "severity": episode.severity,
                "start_ms": episode.start_ms,
                "end_ms": end_ms,
                "revision": episode.revision,
                "model": obs.model,
            }
        )


def resume(
    device_id: str, st: DeviceScoringState, now_ms: int, min_readings: int, clear_readings: int
) -> Lifecycle:
    """The device's alert episodes as its state holds them (``st["episodes"]``; written back
    with :meth:`Lifecycle.dump`)."""
    return Lifecycle(
        device_id,
        int(st["params_version"]),
        now_ms,
        min_readings,
        clear_readings,
        Lifecycle.load(st["episodes"]),
    )


def _finite(x: float) -> float | None:
    return None if x != x else float(x)
