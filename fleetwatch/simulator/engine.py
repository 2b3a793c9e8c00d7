"""The simulated fleet (or one publisher's share of it) as pure state: no I/O, clock injected.

``Fleet.step(now_ms)`` returns every message due by ``now_ms`` (topic, payload bytes) and the
truth records that became final. Readings are generated per tick with numpy for all due devices
of a kind and formatted with one bytes template per kind; only readings touched by an anomaly
or misbehaviour take a slower per-reading path.

Each kind's noise (:mod:`fleetwatch.simulator.noise`) is resolved once from the scenario: the
kind's generator draws it, the engine rounds readings to the kind's resolution (after any
anomaly: the sensor quantises what it measures), times each reading up to ``jitter`` of its
interval after its nominal time (a device's nominal times stay on its grid, so the mean rate is
kept), and labels the benign level changes and bursts in the truth as ``"class": "normal"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetwatch.simulator import misbehaviour as mb
from fleetwatch.simulator.anomalies import RECENT, Anomaly, Planner, legacy_spike, resting
from fleetwatch.simulator.kinds import KINDS, Kind
from fleetwatch.simulator.noise import I64, Draws, Noise, lateness_ms, quantise
from fleetwatch.simulator.randomness import uniform
from fleetwatch.simulator.scenario import Scenario

NEVER = 2**62
_KIND_PICK, _STAGGER = 1, 2


@dataclass
class Tick:
    messages: list[tuple[str, bytes]] = field(default_factory=list)
    truth: list[dict[str, Any]] = field(default_factory=list)
    readings: int = 0
    """Readings generated (sent, buffered or dropped by an anomaly)."""


class Fleet:
    def __init__(
        self,
        scenario: Scenario,
        devices: Sequence[int],
        start_ms: int,
        topic: Callable[[str], str],
    ) -> None:
        sc = self.scenario = scenario
        self.seed = sc.seed
        self.start_ms = start_ms
        self.gidx: I64 = np.asarray(devices, dtype=np.int64)
        n = len(self.gidx)
        self.ids = [sc.device_id(int(i)) for i in self.gidx]
        self.position = {d: p for p, d in enumerate(self.ids)}
        self.topics = [topic(d) for d in self.ids]
        names = list(sc.kinds)
        weights = np.cumsum([sc.kinds[k] for k in names]) / sum(sc.kinds.values())
        picks = np.searchsorted(weights, uniform(self.seed, _KIND_PICK, self.gidx, 0))
        self.kind_code: I64 = np.minimum(picks, len(names) - 1).astype(np.int64)
        self.kinds: list[Kind] = [KINDS[k] for k in names]
        self.noises: list[Noise] = [sc.noise.of(k) for k in names]
        self.templates = [
            k.payload_template(noise.resolution)
            for k, noise in zip(self.kinds, self.noises, strict=True)
        ]
        self.steps = [
            noise.steps(k.metrics) for k, noise in zip(self.kinds, self.noises, strict=True)
        ]
        self.jitter = np.array([noise.jitter for noise in self.noises])[self.kind_code]
        base = sc.interval_ms
        self.interval: I64 = np.full(n, base, dtype=np.int64)
        stagger = (uniform(self.seed, _STAGGER, self.gidx, 0) * base).astype(np.int64)
        self.seq: I64 = np.zeros(n, dtype=np.int64)
        self.grid: I64 = start_ms + stagger
        """Each device's nominal time of its next reading."""
        self.next_due: I64 = self.grid + self._late(np.arange(n), self.seq)
        """When it is taken: its nominal time plus its sampling jitter."""
        self.last_ts: I64 = np.full(n, -1, dtype=np.int64)
        """The time of each device's previous reading (-1: none yet)."""
        self.end_ms = NEVER if sc.duration_s is None else start_ms + round(sc.duration_s * 1000)
        self.count = NEVER if sc.count is None else sc.count
        self.planner = Planner(sc.anomalies, self.seed, base)
        self.anomaly_n = np.zeros(n, dtype=np.int64)
        self.next_anomaly: I64 = np.array(
            [self.planner.next_start(int(g), 0, 0) for g in self.gidx], dtype=np.int64
        )
        self.active: dict[int, Anomaly] = {}
        self.stuck: dict[int, np.ndarray] = {}
        mis = sc.misbehaviour
        self.skew: I64 = np.array([mb.skew_ms(mis, self.seed, int(g)) for g in self.gidx])
        self.offline_planner = mb.OfflinePlanner(mis, self.seed, base)
        self.offline_n = np.zeros(n, dtype=np.int64)
        self.next_offline: I64 = np.array(
            [self.offline_planner.next_start(int(g), 0, 0) for g in self.gidx], dtype=np.int64
        )
        self.offline: dict[int, mb.Offline] = {}
        self.flags = mis.duplicate_rate > 0 or mis.malformed_rate > 0

    # ---- the clock ------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return bool((self.next_due >= NEVER).all())

    def next_due_ms(self) -> int:
        return int(self.next_due.min()) if len(self.next_due) else NEVER

    def step(self, now_ms: int) -> Tick:
        tick = Tick()
        due = np.flatnonzero(self.next_due <= now_ms)
        if due.size == 0:
            return tick
        seq = self.seq[due].copy()
        ts = self.next_due[due].copy()
        before = self.last_ts[due].copy()
        self.last_ts[due] = ts
        self.seq[due] += 1
        self.grid[due] += self.interval[due]
        self.next_due[due] = self.grid[due] + self._late(due, self.seq[due])
        over = (self.seq[due] >= self.count) | (self.next_due[due] >= self.end_ms)
        self.next_due[due[over]] = self.grid[due[over]] = NEVER
        tick.readings = int(due.size)
        if len(self.kinds) == 1:
            self._emit(0, self.kinds[0], due, seq, ts, before, now_ms, tick)
        else:
            codes = self.kind_code[due]
            for code, kind in enumerate(self.kinds):
                sel = np.flatnonzero(codes == code)
                if len(sel):
                    self._emit(code, kind, due[sel], seq[sel], ts[sel], before[sel], now_ms, tick)
        for p in due[over].tolist():
            self._flush_offline(p, now_ms, tick)
        return tick

    def _late(self, pos: I64, seq: I64) -> I64:
        """The sampling jitter of reading ``seq`` of the devices at ``pos``."""
        return lateness_ms(self.seed, self.gidx[pos], seq, self.interval[pos], self.jitter[pos])

    # ---- one kind's readings of a tick --------------------------------------------------

    def _emit(
        self,
        code: int,
        kind: Kind,
        pos: I64,
        seq: I64,
        ts: I64,
        before: I64,
        now_ms: int,
        tick: Tick,
    ) -> None:
        gidx = self.gidx[pos]
        noise = self.noises[code]
        draws = Draws(noise, self.seed, gidx, seq, ts)
        values = kind.generate(draws)
        keep = np.ones(len(pos), dtype=bool)
        spike_every = self.scenario.anomalies.spike_every
        if spike_every:
            size = self.scenario.anomalies.spike_size
            n_devices = self.scenario.devices
            for i in np.flatnonzero((seq * n_devices + gidx + 1) % spike_every == 0).tolist():
                values[i, 0] += size
                did, s, t = self.ids[pos[i]], int(seq[i]), int(ts[i])
                tick.truth.append(legacy_spike(did, kind.metrics[0], s, t, size))
        if self.planner.enabled:
            touched = np.flatnonzero(seq >= self.next_anomaly[pos])
            for i in touched.tolist():
                reading = (int(seq[i]), int(ts[i]), int(before[i]))
                keep[i] = self._anomaly(int(pos[i]), kind, noise, reading, values[i], tick)
        quantise(values, self.steps[code])
        for i, label in draws.benign_labels(before):
            head = {"class": label.pop("class"), "device_id": self.ids[pos[i]]}
            head |= {"kind": label.pop("kind"), "metric": None, "metrics": list(kind.metrics)}
            tick.truth.append(head | label)
        skew = self.skew[pos]
        sent = now_ms + skew
        rows = list(
            zip(seq.tolist(), (ts + skew).tolist(), sent.tolist(), *values.T.tolist(), strict=True)
        )
        offline = np.flatnonzero(seq >= self.next_offline[pos])
        special = ~keep
        special[offline] = True
        if self.flags:
            dup, bad = mb.per_reading_flags(self.scenario.misbehaviour, self.seed, gidx, seq)
            special |= dup | bad
        template = self.templates[code]
        topics, out = self.topics, tick.messages
        if not special.any():
            out.extend(
                zip([topics[p] for p in pos.tolist()], [template % r for r in rows], strict=True)
            )
            return
        for i in np.flatnonzero(~special).tolist():
            out.append((topics[pos[i]], template % rows[i]))
        for i in np.flatnonzero(special).tolist():
            if keep[i]:
                self._special(int(pos[i]), template, rows[i], int(ts[i]), now_ms, tick)

    def _special(
        self, p: int, template: bytes, row: tuple[Any, ...], ts: int, now_ms: int, tick: Tick
    ) -> None:
        did, g, seq = self.ids[p], int(self.gidx[p]), int(row[0])
        if seq >= self.next_offline[p]:
            window = self.offline.get(p)
            if window is None:
                window = self.offline_planner.window(g, int(self.offline_n[p]), seq)
                self.offline[p] = window
            window.buffer(template, row, ts)
            if seq >= window.end_seq:
                self._flush_offline(p, now_ms, tick)
            return
        mis = self.scenario.misbehaviour
        dup, bad = mb.per_reading_flags(mis, self.seed, np.array([g]), np.array([seq]))
        if bad[0]:
            variant, payload = mb.malformed(self.seed, g, seq, int(row[1]), int(row[2]))
            tick.truth.append(mb.label("malformed", did, ts, ts, seq=seq, variant=variant))
        else:
            payload = template % row
        tick.messages.append((self.topics[p], payload))
        if dup[0]:
            tick.messages.append((self.topics[p], payload))
            tick.truth.append(mb.label("duplicate", did, ts, ts, seq=seq))

    def _flush_offline(self, p: int, now_ms: int, tick: Tick) -> None:
        window = self.offline.pop(p, None)
        if window is None:
            return
        g = int(self.gidx[p])
        payloads = window.flush(self.seed, g, now_ms + int(self.skew[p]))
        tick.messages.extend((self.topics[p], payload) for payload in payloads)
        if window.first_ts is not None and window.last_ts is not None:
            tick.truth.append(
                mb.label(
                    "offline",
                    self.ids[p],
                    window.first_ts,
                    window.last_ts,
                    buffered=len(payloads),
                    flushed_ms=now_ms,
                )
            )
        self.offline_n[p] += 1
        after = int(self.seq[p])
        self.next_offline[p] = self.offline_planner.next_start(g, int(self.offline_n[p]), after)

    # ---- anomalies ----------------------------------------------------------------------

    def _anomaly(
        self,
        p: int,
        kind: Kind,
        noise: Noise,
        reading: tuple[int, int, int],
        row: np.ndarray,
        tick: Tick,
    ) -> bool:
        """``reading``: its seq, its time and the time of the device's reading before it."""
        seq, ts, before = reading
        g = int(self.gidx[p])
        anomaly = self.active.get(p)
        if anomaly is None:
            # the readings before this one (times before the last one's taken as nominal)
            interval = int(self.interval[p])
            last = before if before >= 0 else ts - interval
            back = np.arange(RECENT - 1, 0, -1)
            times = last - (back - 1) * interval
            earlier = kind.generate(
                Draws(noise, self.seed, np.full(back.size, g), seq - back, times)
            )
            still = resting(kind, noise, np.vstack([earlier, row]))
            n = int(self.anomaly_n[p])
            anomaly = self.planner.plan(g, self.ids[p], n, seq, kind, noise, still)
            self.active[p] = anomaly
            if anomaly.kind == "stuck":  # flat-lines at the reading before
                self.stuck[p] = earlier[-1]
        burst = self.planner.burst(g, seq) if anomaly.kind == "noise_burst" else 0.0
        sent = anomaly.apply(row, seq, self.stuck.get(p), burst)
        anomaly.first_ts = ts if anomaly.first_ts is None else anomaly.first_ts
        anomaly.last_ts = ts
        if seq >= anomaly.end_seq:
            self._end_anomaly(p, seq, tick)
        return sent

    def _end_anomaly(self, p: int, seq: int, tick: Tick) -> None:
        anomaly = self.active.pop(p)
        self.stuck.pop(p, None)
        if anomaly.first_ts is not None:
            tick.truth.append(anomaly.truth())
        self.anomaly_n[p] += 1
        g, n = int(self.gidx[p]), int(self.anomaly_n[p])
        self.next_anomaly[p] = self.planner.next_start(g, n, seq + 1)

    # ---- what commands do ---------------------------------------------------------------

    def set_interval(self, p: int, interval_ms: int, now_ms: int) -> None:
        self.interval[p] = interval_ms
        if self.next_due[p] < NEVER:
            self.grid[p] = min(int(self.grid[p]), now_ms + interval_ms)
            self._retime(p)

    def reboot(self, p: int, now_ms: int, silent_ms: int) -> None:
        if self.next_due[p] < NEVER:
            self.grid[p] = max(int(self.grid[p]), now_ms + silent_ms)
            self._retime(p)

    def _retime(self, p: int) -> None:
        at = np.array([p])
        self.next_due[p] = self.grid[p] + int(self._late(at, self.seq[at])[0])

    def calibrate(self, p: int, tick: Tick) -> bool:
        """Clear an active drift (its truth ends at the last drifted reading)."""
        anomaly = self.active.get(p)
        if anomaly is None or anomaly.kind != "drift":
            return False
        anomaly.params["calibrated"] = True
        self._end_anomaly(p, int(self.seq[p]) - 1, tick)
        return True

    def device_ms(self, p: int, now_ms: int) -> int:
        return now_ms + int(self.skew[p])

    # ---- the end ------------------------------------------------------------------------

    def close(self, now_ms: int) -> Tick:
        """Flush offline buffers, finish active anomalies, label the skewed clocks."""
        tick = Tick()
        for p in list(self.offline):
            self._flush_offline(p, now_ms, tick)
        for p in list(self.active):
            self.active[p].params["cut_short"] = True
            self._end_anomaly(p, int(self.seq[p]) - 1, tick)
        for p in np.flatnonzero(self.skew).tolist():
            offset = int(self.skew[p])
            tick.truth.append(
                mb.label("clock_skew", self.ids[p], self.start_ms, now_ms, offset_ms=offset)
            )
        return tick
