import itertools

import numpy as np
import pytest

from fleetwatch.simulator.kinds import KINDS
from fleetwatch.simulator.scenario import ANOMALY_KINDS, AnomalySpec, Scenario
from tests.unit.sim_helpers import simulate

ALL_KINDS = dict.fromkeys(KINDS, 1.0)


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    spec = Scenario(devices=6, kinds=ALL_KINDS, rate=1, count=50, seed=11)
    spec = spec.with_overrides(per_device_hour=200.0)
    first, again = simulate(spec), simulate(spec)
    assert first.messages == again.messages
    assert first.truth == again.truth
    other = simulate(spec.with_overrides(seed=12))
    assert other.messages != first.messages


@pytest.mark.parametrize("noise", ["gaussian", "realistic"])
def test_anomalies_change_readings_exactly_where_the_truth_says(noise: str) -> None:
    """Under realistic noise a drift's first steps may round away, and a stuck value may equal
    what the sensor would have read, at its resolution: every change is labelled, not every
    labelled reading changes."""
    clean = Scenario(devices=8, kinds=ALL_KINDS, rate=1, count=400, seed=3, noise=noise)  # type: ignore[arg-type]
    dirty = clean.with_overrides(per_device_hour=60.0)
    base, run = simulate(clean).readings(), simulate(dirty)
    labelled: set[tuple[str, int]] = set()
    dropouts: set[tuple[str, int]] = set()
    faint: set[tuple[str, int]] = set()
    kinds_seen = set()
    assert [t for t in run.truth if t["class"] == "normal"] == [
        t for t in simulate(clean).truth if t["class"] == "normal"
    ], "benign events do not depend on anomalies"
    for t in (t for t in run.truth if t["class"] == "anomaly"):
        kinds_seen.add(t["kind"])
        first = t["seq"]
        span = [s for (d, s), r in base.items() if d == t["device_id"] and first <= s]
        last = max(s for s in span if base[(t["device_id"], s)]["ts"] <= t["end_ms"])
        assert base[(t["device_id"], first)]["ts"] == t["start_ms"]
        window = {(t["device_id"], s) for s in range(first, last + 1)}
        assert not window & labelled, "one anomaly at a time per device"
        labelled |= window
        if t["kind"] == "dropout":
            dropouts |= window
        if t["kind"] in ("drift", "stuck"):
            faint |= window
    assert kinds_seen == set(ANOMALY_KINDS), "a long run shows every kind"
    readings = run.readings()
    changed = {k for k, r in base.items() if readings.get(k, {}).get("metrics") != r["metrics"]}
    if noise == "gaussian":
        assert changed == labelled
    else:
        assert changed <= labelled
        assert labelled - changed <= faint
    assert {k for k in base if k not in readings} == dropouts


@pytest.mark.parametrize(("noise", "spread"), [("gaussian", 3.5), ("realistic", 6.0)])
def test_kinds_look_like_their_sensors(noise: str, spread: float) -> None:
    """Realistic noise wanders and has heavy tails, so its temperatures spread wider."""
    spec = Scenario(devices=40, kinds=ALL_KINDS, rate=0.05, count=300, seed=5, noise=noise)  # type: ignore[arg-type]
    readings = list(simulate(spec).readings().values())
    by_metric: dict[str, list[float]] = {}
    pairs = []
    for r in readings:
        for name, value in r["metrics"].items():
            by_metric.setdefault(name, []).append(value)
        if "temperature" in r["metrics"]:
            pairs.append((r["metrics"]["temperature"], r["metrics"]["humidity"]))
    temps = np.array(by_metric["temperature"])
    assert abs(temps.mean() - 21.0) < 0.5
    assert temps.min() > 21 - spread
    assert temps.max() < 21 + spread
    t, h = np.array(pairs).T
    assert np.corrcoef(t, h)[0, 1] < -0.7, "humidity falls as temperature rises"
    rms = np.array(by_metric["vibration_rms"])
    assert 0.3 < (rms > 2).mean() < 0.9, "vibration shows on and off regimes"
    quiet = (np.round(rms[rms < 2]) == 0).mean()
    assert quiet == 1.0 if noise == "gaussian" else quiet > 0.98, "off is quiet (but for shocks)"
    power = np.array(by_metric["power_w"]) / np.array(by_metric["voltage"])
    assert np.allclose(power, by_metric["current_a"], atol=0.011)  # each rounded on its own
    assert min(by_metric["soc_pct"]) >= 14
    assert max(by_metric["soc_pct"]) <= 101


def test_spike_every_spikes_every_nth_fleet_reading_by_25() -> None:
    spec = Scenario(devices=3, rate=10, count=20, anomalies=AnomalySpec(spike_every=45))
    run = simulate(spec)
    assert [(t["device_id"], t["seq"]) for t in run.truth] == [("sensor-0002", 14)]
    for (device, seq), r in run.readings().items():
        spike = (seq * 3 + int(device[-4:]) + 1) % 45 == 0
        assert (abs(r["metrics"]["temperature"] - 21.0) > 8) == spike


@pytest.mark.parametrize("rate", [0.5, 2.0])
@pytest.mark.parametrize("noise", ["gaussian", "realistic"])
def test_each_device_keeps_its_own_sequence_and_interval(rate: float, noise: str) -> None:
    """Realistic noise times each reading up to ``jitter`` of its interval late."""
    run = simulate(Scenario(devices=2, rate=rate, count=5, noise=noise))  # type: ignore[arg-type]
    mine = sorted((seq, r["ts"]) for (d, seq), r in run.readings().items() if d == "sensor-0001")
    assert [s for s, _ in mine] == [0, 1, 2, 3, 4]
    jitter = KINDS["temperature"].noise.jitter if noise == "realistic" else 0.0
    interval = round(1000 / rate)
    for (_, a), (_, b) in itertools.pairwise(mine):
        assert interval * (1 - jitter) - 1 < b - a < interval * (1 + jitter) + 1
