"""The simulator's realistic noise: each component's statistical property on a long stream."""

import dataclasses
import hashlib
import itertools
import json
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from fleetwatch.simulator import evaluate as ev
from fleetwatch.simulator.anomalies import EXTENTS, smallest
from fleetwatch.simulator.engine import Fleet
from fleetwatch.simulator.errors import ScenarioError
from fleetwatch.simulator.kinds import KINDS
from fleetwatch.simulator.noise import (
    NO_BURST,
    WANDER_TERMS,
    Draws,
    Noise,
    bursts,
    extreme,
    wander,
)
from fleetwatch.simulator.randomness import normal, shared_uniform, student_t, uniform
from fleetwatch.simulator.recording import read_header, record
from fleetwatch.simulator.scenario import (
    AnomalySpec,
    MisbehaviourSpec,
    NoiseSpec,
    Scenario,
    load_scenario,
    scenario_from_dict,
    scenario_to_dict,
)
from tests.unit.sim_helpers import Run, simulate

T0 = 1_700_000_000_000
ALL_KINDS = dict.fromkeys(KINDS, 1.0)
F64 = npt.NDArray[np.float64]


def excess_kurtosis(x: F64) -> float:
    d = x - x.mean()
    return float((d**4).mean() / (d**2).mean() ** 2 - 3.0)


def generated(kind: str, noise: Noise, n: int = 100_000, interval_ms: int = 1000) -> F64:
    """One device's readings of ``kind`` straight from its generator (no engine)."""
    seq = np.arange(n, dtype=np.int64)
    draws = Draws(noise, 7, np.zeros(n, dtype=np.int64), seq, T0 + seq * interval_ms)
    return KINDS[kind].generate(draws)


def series(run: Run, metric: str) -> dict[str, list[tuple[int, int, float]]]:
    """Per device, (seq, ts, value) of ``metric`` in seq order."""
    out: dict[str, list[tuple[int, int, float]]] = {}
    for (device, seq), r in sorted(run.readings().items()):
        if metric in r["metrics"]:
            out.setdefault(device, []).append((seq, r["ts"], r["metrics"][metric]))
    return out


# ---- heavy tails --------------------------------------------------------------------------


def test_student_t_noise_has_heavy_tails_at_unit_variance() -> None:
    device, seq = np.zeros(400_000, dtype=np.int64), np.arange(400_000)
    gaussian = normal(3, 21, device, seq)
    for df in (5.0, 8.0):
        x = student_t(3, 21, device, seq, df)
        assert abs(x.var() - 1.0) < 0.05
        assert excess_kurtosis(x) > 0.5 * 6.0 / (df - 4.0)  # theory: 6 / (df - 4)
        assert (np.abs(x) > 5).mean() > 20 * (np.abs(gaussian) > 5).mean() + 1e-5
    assert abs(excess_kurtosis(gaussian)) < 0.05
    assert np.array_equal(student_t(3, 21, device, seq, math.inf), gaussian)


def test_a_kinds_heavy_tails_show_in_its_readings() -> None:
    """First differences of temperature are its noise (the daily cycle hardly moves in 1 s)."""
    heavy = np.diff(generated("temperature", Noise(df=4.0))[:, 0])
    plain = np.diff(generated("temperature", Noise())[:, 0])
    assert abs(excess_kurtosis(plain)) < 0.1
    assert excess_kurtosis(heavy) > 2.0
    assert abs(heavy.std() / plain.std() - 1.0) < 0.05, "the same variance, another shape"


# ---- the wandering offset -----------------------------------------------------------------


def test_the_wander_is_slow_bounded_and_mean_reverting() -> None:
    minutes = 20.0
    devices = np.arange(300, dtype=np.int64)
    ts = T0 + np.arange(0, 8 * 3600_000, 10_000, dtype=np.int64)  # 8 h = 24 time constants
    w = np.stack([wander(5, 41, np.full(ts.size, d), ts, minutes) for d in devices])
    assert np.abs(w).max() <= math.sqrt(2 * WANDER_TERMS)
    assert abs(w.var() - 1.0) < 0.15

    def autocorrelation(lag_s: int) -> float:
        k = lag_s // 10
        return float((w[:, :-k] * w[:, k:]).mean() / w.var())

    assert autocorrelation(60) > 0.9, "slow: a minute later it is nearly where it was"
    assert abs(autocorrelation(60 * 20) - math.exp(-1)) < 0.12, "forgets at its time constant"
    assert abs(autocorrelation(60 * 100)) < 0.12
    # a random walk's spread grows with time; this one's stays where it started
    early, late = w[:, :60].std(), w[:, -60:].std()
    assert 0.75 < late / early < 1.33


def test_the_wander_moves_a_kinds_readings_by_its_size() -> None:
    n = 20_000
    walked = generated("temperature", Noise(walk=0.25, walk_minutes=30.0), n)
    plain = generated("temperature", Noise(), n)
    seq = np.arange(n, dtype=np.int64)
    offset = 2.0 * 0.25 * wander(7, 41, np.zeros(n, dtype=np.int64), T0 + seq * 1000, 30.0)
    assert np.allclose(walked[:, 0] - plain[:, 0], offset)
    assert np.abs(offset).max() <= 0.5 * math.sqrt(2 * WANDER_TERMS)


# ---- benign level changes -----------------------------------------------------------------


def test_benign_level_changes_are_steps_that_stay_and_are_not_anomalies() -> None:
    """Power meters switching a load: each change is a step of 0.5-1 x 400 W that stays until
    the next, labelled ``normal`` in the truth, so an alert on it is a false alert."""
    base = Scenario(devices=4, kinds={"power": 1.0}, rate=0.1, count=1440, seed=9)
    plain = simulate(base.with_overrides(noise="gaussian"))
    steps = base.with_overrides(
        noise={"model": "gaussian", "level_changes_per_hour": 2.0, "level_change": 1.0}
    )
    run = simulate(steps)
    labels = [t for t in run.truth if t["kind"] == "level_change"]
    assert {t["class"] for t in run.truth} == {"normal"}
    assert ev.truth_events(run.truth) == [], "not anomalies"
    hours = 1440 * 10 / 3600
    assert 4 * (hours * 2 - 2) <= len(labels) <= 4 * (hours * 2 + 1)
    before, after = series(plain, "power_w"), series(run, "power_w")
    for device, readings in after.items():
        shift = np.array([v for *_, v in readings]) - np.array([v for *_, v in before[device]])
        times = np.array([ts for _, ts, _ in readings])
        mine = [t for t in labels if t["device_id"] == device]
        moved = np.flatnonzero(np.abs(np.diff(shift)) > 1.0) + 1  # the wire's 0.1 W aside
        assert [int(times[i]) for i in moved] == [
            int(times[np.searchsorted(times, t["start_ms"])]) for t in mine
        ], "the level moves exactly where a change is labelled, and stays between"
        for i, label in zip(moved.tolist(), mine, strict=True):
            assert 200 - 0.2 <= abs(shift[i] - shift[i - 1]) <= 400 + 0.2
            assert shift[i] - shift[i - 1] == pytest.approx(
                label["params"]["change"] * 400, abs=0.2
            )
    # an alert at a benign change matches no anomaly: evaluation counts it false
    first = labels[0]
    alert = ev.AlertEvent(first["device_id"], "power_w", first["start_ms"] + 1000)
    assert ev.evaluate(ev.truth_events(run.truth), [alert], 30_000, 1.0)["false_alerts"] == 1


def test_benign_labels_sit_beside_anomalies_without_changing_them() -> None:
    spec = Scenario(devices=8, kinds=ALL_KINDS, rate=0.2, count=300, seed=4)
    spec = spec.with_overrides(per_device_hour=15.0)
    run = simulate(spec)
    gaussian = simulate(spec.with_overrides(noise="gaussian"))
    classes = {t["class"] for t in run.truth}
    assert classes == {"anomaly", "normal"}
    anomalies = [
        (t["device_id"], t["seq"], t["kind"]) for t in run.truth if t["class"] == "anomaly"
    ]
    planned = [(t["device_id"], t["seq"], t["kind"]) for t in gaussian.truth]
    assert anomalies == planned, "the same anomalies, planned the same way"


# ---- bursts -------------------------------------------------------------------------------


def test_bursts_are_noisier_spells() -> None:
    """The per-reading noise is ``burst_gain`` times larger within a burst and only there."""
    n = 8 * 3600
    noise = Noise(bursts_per_hour=4.0, burst_s=(30.0, 120.0), burst_gain=3.0)
    noisy, plain = generated("temperature", noise, n), generated("temperature", Noise(), n)
    seq = np.arange(n, dtype=np.int64)
    inside = bursts(7, np.zeros(n, dtype=np.int64), T0 + seq * 1000, 4.0, (30.0, 120.0))
    within = inside.burst != NO_BURST
    extra = noisy[:, 0] - plain[:, 0]
    assert np.array_equal(extra != 0, within), "noisier only within a burst"
    error = np.diff(plain[:, 0])  # the daily cycle hardly moves in a second
    ratio = (np.diff(noisy[:, 0])[within[1:] & within[:-1]]).std() / error.std()
    assert 2.7 < ratio < 3.3
    assert abs(within.mean() - 4 * 75 / 3600) < 0.02, "4 bursts an hour, 75 s on average"


def test_bursts_are_labelled_normal_where_they_are() -> None:
    burst = {"bursts_per_hour": 6.0, "burst_s": [40.0, 80.0], "burst_gain": 3.0}
    spec = Scenario(devices=3, rate=0.5, count=1800, seed=2)
    run = simulate(spec.with_overrides(noise={"model": "gaussian", "temperature": burst}))
    plain = simulate(spec.with_overrides(noise="gaussian"))
    labels = [t for t in run.truth if t["kind"] == "burst"]
    assert {t["class"] for t in run.truth} == {"normal"}
    assert ev.truth_events(run.truth) == []
    assert 3 * (6 - 1) <= len(labels) <= 3 * (6 + 1)
    before, after = series(plain, "temperature"), series(run, "temperature")
    for device, readings in after.items():
        times = np.array([ts for _, ts, _ in readings])
        changed = np.array([v for *_, v in readings]) != np.array([v for *_, v in before[device]])
        inside = np.zeros(times.size, dtype=bool)
        for t in labels:
            if t["device_id"] == device:
                assert t["end_ms"] - t["start_ms"] in range(40_000, 80_001)
                inside |= (times >= t["start_ms"]) & (times < t["end_ms"])
        assert not (changed & ~inside).any(), "every noisier reading is in a labelled burst"
        assert changed[inside].mean() > 0.8


# ---- quantisation -------------------------------------------------------------------------


def test_readings_sit_on_their_kinds_resolution() -> None:
    run = simulate(Scenario(devices=12, kinds=ALL_KINDS, rate=1, count=600, seed=8))
    seen = set()
    for _, payload in run.messages:
        body = json.loads(payload)
        kind = next(k for k in KINDS.values() if set(body["metrics"]) == set(k.metrics))
        for metric, value in body["metrics"].items():
            step = kind.noise.resolution[metric]
            assert abs(value / step - round(value / step)) < 1e-6, (metric, value)
            written = payload.split(f'"{metric}":'.encode())[1].split(b",")[0].rstrip(b"}")
            decimals = len(written.split(b".")[1]) if b"." in written else 0
            assert decimals == max(0, -math.floor(math.log10(step) + 1e-9))
            seen.add(metric)
    assert seen == {m for k in KINDS.values() for m in k.metrics}


# ---- sampling jitter ----------------------------------------------------------------------


def test_sampling_jitter_varies_intervals_within_bounds_and_keeps_the_mean_rate() -> None:
    spec = Scenario(devices=3, kinds={"battery": 1.0}, rate=1, count=3000, seed=6)
    run = simulate(spec)
    jitter = KINDS["battery"].noise.jitter
    for readings in series(run, "battery_v").values():
        seqs = [s for s, _, _ in readings]
        assert seqs == list(range(3000))
        gaps = np.diff([ts for _, ts, _ in readings])
        assert gaps.min() > 1000 * (1 - jitter) - 1
        assert gaps.max() < 1000 * (1 + jitter) + 1
        assert gaps.std() > 1000 * jitter / 4, "irregular"
        assert abs(gaps.mean() - 1000) < 1000 * jitter / 2999 + 1e-9, "the nominal rate"
        assert abs(float(np.mean(gaps[:1000])) - 1000) < 1
    plain = simulate(spec.with_overrides(noise="gaussian"))
    for readings in series(plain, "battery_v").values():
        assert set(np.diff([ts for _, ts, _ in readings]).tolist()) == {1000}


# ---- determinism --------------------------------------------------------------------------


def test_realistic_noise_is_the_same_for_a_seed_however_the_fleet_is_split() -> None:
    spec = Scenario(devices=6, kinds=ALL_KINDS, rate=0.2, count=300, seed=11)
    spec = spec.with_overrides(per_device_hour=20.0)
    first, again = simulate(spec), simulate(spec)
    assert first.messages == again.messages
    assert first.truth == again.truth
    assert simulate(spec.with_overrides(seed=12)).messages != first.messages

    def by_device(fleets: list[Fleet]) -> dict[str, list[bytes]]:
        out: dict[str, list[bytes]] = {}
        for fleet in fleets:
            now = fleet.next_due_ms()
            while not fleet.finished:
                for device, payload in fleet.step(now).messages:
                    out.setdefault(device, []).append(payload)
                now = fleet.next_due_ms()
        return out

    whole = by_device([Fleet(spec, range(6), T0, str)])
    halves = by_device([Fleet(spec, range(3), T0, str), Fleet(spec, range(3, 6), T0, str)])
    assert whole == halves


def test_remembered_draws_are_the_draws() -> None:
    device = np.array([1, 2, 3, 1, 2, 3], dtype=np.int64)
    index = np.array([5, 5, 5, 6, 6, 6], dtype=np.int64)
    twice = [shared_uniform(4, 302, device, index) for _ in range(2)]
    assert np.array_equal(twice[0], uniform(4, 302, device, index))
    assert np.array_equal(twice[1], twice[0])


# ---- the scenario -------------------------------------------------------------------------

NOISY = """
devices = 8
kinds = { temperature = 1, power = 1 }
rate = 1.0
count = 120
seed = 5

[noise]
jitter = 0.0

[noise.power]
df = 4
level_changes_per_hour = 0
resolution = { power_w = 10.0 }

[noise.temperature]
walk = 0
"""


def test_a_scenario_noise_table_reaches_the_generator(tmp_path: Path) -> None:
    path = tmp_path / "noisy.toml"
    path.write_text(NOISY)
    scenario = load_scenario(path)
    power, temperature = scenario.noise.of("power"), scenario.noise.of("temperature")
    assert (power.df, power.level_changes_per_hour, power.jitter) == (4.0, 0.0, 0.0)
    assert power.resolution == {"power_w": 10.0, "voltage": 0.1, "current_a": 0.01}
    assert power.burst_gain == KINDS["power"].noise.burst_gain, "the rest stays the default"
    assert (temperature.walk, temperature.df) == (0.0, KINDS["temperature"].noise.df)
    run = simulate(scenario)
    watts = [r["metrics"]["power_w"] for r in run.readings().values() if "power_w" in r["metrics"]]
    assert watts
    assert all(w % 10 == 0 for w in watts)
    for readings in series(run, "temperature").values():
        assert set(np.diff([ts for _, ts, _ in readings]).tolist()) == {1000}, "no jitter"
    assert scenario_from_dict(scenario_to_dict(scenario)) == scenario
    record(scenario, tmp_path / "run.jsonl", T0)
    assert read_header(tmp_path / "run.jsonl") == (scenario, T0)


def test_a_scenario_without_noise_is_realistic_and_gaussian_is_one_word(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("devices = 2\n")
    assert load_scenario(path).noise == NoiseSpec()
    assert load_scenario(path).noise.of("vibration") == KINDS["vibration"].noise
    path.write_text('devices = 2\nnoise = "gaussian"\n')
    assert load_scenario(path).noise.of("vibration") == Noise()
    path.write_text('devices = 2\n[noise]\nmodel = "gaussian"\n[noise.battery]\njitter = 0.2\n')
    spec = load_scenario(path).noise
    assert spec.of("battery") == Noise(jitter=0.2)
    assert spec.of("power") == Noise()


@pytest.mark.parametrize(
    "text",
    [
        'noise = "pink"',
        "[noise]\ncolour = 1",
        "[noise]\ndf = 2",
        "[noise]\njitter = 1.0",
        "[noise]\nburst_gain = 0.5",
        "[noise]\nburst_s = [30, 10]",
        "[noise]\nwalk = -1",
        "[noise]\nresolution = { watts = 1 }",
        "[noise.power]\nresolution = { temperature = 0.5 }",
        "[noise.toaster]\ndf = 5",
        "[noise]\nwalk = 'a lot'",
    ],
)
def test_bad_noise_settings_are_refused_with_a_reason(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError):
        load_scenario(path)


# ---- the noise before --------------------------------------------------------------------

GOLDEN = (
    3176,
    69,
    "1de9993ab9ee1778d94d0cd1545fe21bba2290201a4654b75ee970df7a024f1f",
    "95b28d01e2f7a97269c8c49ff88fba724b82823d2077f085e4242203c5705754",
)
"""Messages, truth records and their digests of the run below, by the simulator as it was
before it had realistic noise (every kind, anomalies, every misbehaviour)."""


def test_gaussian_noise_reproduces_the_earlier_stream_exactly() -> None:
    spec = Scenario(
        devices=8,
        kinds=ALL_KINDS,
        rate=1,
        count=400,
        seed=3,
        misbehaviour=MisbehaviourSpec(
            skewed_fraction=0.3,
            offline_per_device_hour=20,
            duplicate_rate=0.01,
            malformed_rate=0.01,
        ),
        noise=NoiseSpec(model="gaussian"),
    ).with_overrides(per_device_hour=60.0)
    run = simulate(spec)
    messages = hashlib.sha256()
    for device, payload in run.messages:
        messages.update(device.encode() + b"\0" + payload + b"\n")
    truth = hashlib.sha256(json.dumps(run.truth, sort_keys=True).encode())
    assert (len(run.messages), len(run.truth), messages.hexdigest(), truth.hexdigest()) == GOLDEN


# ---- anomalies stay visible ---------------------------------------------------------------


def test_a_stuck_value_is_planned_only_where_it_would_show() -> None:
    """A whole-per-cent charge level repeats for half an hour anyway, and a stopped machine's
    speed is 0 anyway: stuck, they look normal. The Gaussian noise keeps the earlier plan."""
    stuck = AnomalySpec(per_device_hour=90.0, mix={"stuck": 1.0})
    spec = Scenario(devices=16, kinds={"battery": 1, "vibration": 1}, rate=0.5, count=600, seed=1)
    spec = dataclasses.replace(spec, anomalies=stuck)
    realistic = simulate(spec)
    gaussian = simulate(spec.with_overrides(noise="gaussian"))
    metrics = {t["metric"] for t in realistic.truth if t["class"] == "anomaly"}
    assert metrics == {"battery_v", "vibration_rms", "rpm"}
    assert {t["metric"] for t in gaussian.truth} == {"battery_v", "soc_pct", "vibration_rms", "rpm"}
    readings = realistic.readings()
    for t in realistic.truth:
        if t["metric"] == "rpm":
            before = readings.get((t["device_id"], t["seq"] - 1))
            assert before is None or before["metrics"]["rpm"] != 0, "not a stopped machine's"


def test_extreme_deviations_are_those_of_the_draws() -> None:
    device, seq = np.zeros(1_000_000, dtype=np.int64), np.arange(1_000_000)
    for df in (4.0, 8.0, math.inf):
        x = extreme(df, 1e-3)
        beyond = (np.abs(student_t(2, 21, device, seq, df)) > x).mean()
        assert abs(beyond - 1e-3) < 1.5e-4
    assert extreme(math.inf, 1e-4) == pytest.approx(3.8906, abs=1e-3)
    assert extreme(4.0, 1e-4) > 2.5 * extreme(math.inf, 1e-4)


def test_spikes_stand_out_of_heavy_tailed_shocks() -> None:
    """A running machine's vibration has shocks as large as the smallest spikes would be: its
    spikes and dips start higher; every other metric keeps the sizes it had."""
    vibration = KINDS["vibration"]
    floor = smallest(vibration, vibration.noise, 0)
    low, high = EXTENTS["spike"].scales
    assert floor > low
    assert all(
        smallest(kind, kind.noise, c) < low
        for kind in KINDS.values()
        for c in range(len(kind.metrics))
        if (kind.name, c) != ("vibration", 0)
    )
    assert smallest(vibration, Noise(), 0) < low, "Gaussian sizes as they were"
    mix = AnomalySpec(per_device_hour=120.0, mix={"spike": 1.0, "dip": 1.0})
    spec = Scenario(devices=12, kinds=ALL_KINDS, rate=0.5, count=600, seed=5, anomalies=mix)
    sizes: dict[bool, list[float]] = {True: [], False: []}
    for t in simulate(spec).truth:
        if t["class"] == "anomaly":
            kind = next(k for k in KINDS.values() if t["metric"] in k.metrics)
            size = abs(t["params"]["offsets"][0]) / kind.scales[kind.metrics.index(t["metric"])]
            sizes[t["metric"] == "vibration_rms"].append(size)
    assert sizes[True]
    assert floor - 1e-3 <= min(sizes[True]) <= max(sizes[True]) <= floor + high - low + 1e-3
    assert low - 1e-3 <= min(sizes[False]) <= max(sizes[False]) <= high + 1e-3


def test_every_anomaly_shows_in_the_readings_under_realistic_noise() -> None:
    clean = Scenario(devices=12, kinds=ALL_KINDS, rate=0.5, count=480, seed=3)
    base, run = simulate(clean).readings(), simulate(clean.with_overrides(per_device_hour=60.0))
    readings = run.readings()
    anomalies = [t for t in run.truth if t["class"] == "anomaly"]
    assert {t["kind"] for t in anomalies} >= {"spike", "dip", "level_shift", "drift", "stuck"}
    for t in anomalies:
        window = [
            k
            for k, r in base.items()
            if k[0] == t["device_id"] and t["start_ms"] <= r["ts"] <= t["end_ms"]
        ]
        changed = [k for k in window if readings.get(k, {}).get("metrics") != base[k]["metrics"]]
        assert changed, f"{t['kind']} on {t['device_id']} at {t['seq']} changes nothing"
    for key, r in readings.items():
        if r["metrics"] != base[key]["metrics"]:
            assert any(
                t["device_id"] == key[0] and t["start_ms"] <= r["ts"] <= t["end_ms"]
                for t in anomalies
            ), "readings change only within an anomaly"


def test_intervals_of_one_device_pair_up() -> None:
    """Jitter never reorders a device's readings (its intervals stay positive)."""
    spec = Scenario(devices=2, kinds={"battery": 1.0}, rate=20, count=400, seed=3)
    spec = spec.with_overrides(noise={"battery": {"jitter": 0.95}})
    for readings in series(simulate(spec), "battery_v").values():
        times = [ts for _, ts, _ in readings]
        assert all(b > a for a, b in itertools.pairwise(times))
