from fleetwatch.simulator.fleet import FleetSpec, readings


def test_the_same_seed_gives_the_same_run() -> None:
    spec = FleetSpec(devices=4, seed=11, spike_every=7)
    assert list(readings(spec, 0, 1000, 10)) == list(readings(spec, 0, 1000, 10))
    other = list(readings(FleetSpec(devices=4, seed=12, spike_every=7), 0, 1000, 10))
    assert other != list(readings(spec, 0, 1000, 10))


def test_spikes_are_exactly_where_they_are_labelled() -> None:
    spec = FleetSpec(devices=3, seed=1, spike_every=10)
    run = list(readings(spec, 0, 500, 20))
    spikes = [i + 1 for i, r in enumerate(run) if r.spike]
    assert spikes == [10, 20, 30, 40, 50, 60]
    for r in run:
        assert (abs(r.metrics["temperature"] - 21.0) > 15) == r.spike


def test_each_device_counts_its_own_sequence_and_time() -> None:
    run = list(readings(FleetSpec(devices=2), 1_000, 250, 3))
    assert [(r.device_id, r.seq, r.ts) for r in run if r.device_id.endswith("0001")] == [
        ("sensor-0001", 0, 1_000),
        ("sensor-0001", 1, 1_250),
        ("sensor-0001", 2, 1_500),
    ]
