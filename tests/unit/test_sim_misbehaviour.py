import json
from collections import Counter
from typing import Any

import pytest

from fleetwatch.contracts.errors import PayloadError
from fleetwatch.contracts.telemetry import parse_reading
from fleetwatch.simulator.scenario import MisbehaviourSpec, Scenario
from tests.unit.sim_helpers import Run, simulate

START = 1_700_000_000_000


def run_with(**misbehaviour: Any) -> tuple[Scenario, Run]:
    spec = Scenario(
        devices=10, rate=1, count=300, seed=9, misbehaviour=MisbehaviourSpec(**misbehaviour)
    )
    return spec, simulate(spec, START)


def test_duplicates_are_sent_twice_and_labelled() -> None:
    _, run = run_with(duplicate_rate=0.02)
    labels = [t for t in run.truth if t["kind"] == "duplicate"]
    assert 20 < len(labels) < 120
    counts = Counter(run.messages)
    twice = {(d, json.loads(p)["seq"]) for (d, p), n in counts.items() if n == 2}
    assert twice == {(t["device_id"], t["params"]["seq"]) for t in labels}
    assert set(counts.values()) == {1, 2}


def test_malformed_payloads_break_the_contract_and_are_labelled() -> None:
    _, run = run_with(malformed_rate=0.02)
    labels = {(t["device_id"], t["params"]["seq"]) for t in run.truth if t["kind"] == "malformed"}
    assert len(labels) > 20
    variants = {t["params"]["variant"] for t in run.truth}
    assert len(variants) == 5
    assert len(run.messages) == 10 * 300, "a malformed payload replaces its reading"
    assert {d for d, p in run.messages if _fails(p)} <= {d for d, _ in labels}
    broken = sum(1 for _, p in run.messages if _fails(p))
    assert broken == len(labels)


def _fails(payload: bytes) -> bool:
    try:
        parse_reading(payload)
    except PayloadError:
        return True
    return False


def test_skewed_clocks_are_labelled_with_their_offset() -> None:
    _, run = run_with(skewed_fraction=0.3, skew_s=(60.0, 3600.0))
    skews = {
        t["device_id"]: t["params"]["offset_ms"] for t in run.truth if t["kind"] == "clock_skew"
    }
    assert 1 <= len(skews) <= 7
    for offset in skews.values():
        assert 60_000 <= abs(offset) <= 3_600_000
    clean = simulate(Scenario(devices=10, rate=1, count=300, seed=9), START).readings()
    for (device, seq), reading in run.readings().items():
        assert reading["ts"] - clean[(device, seq)]["ts"] == skews.get(device, 0)


def test_offline_devices_flush_late_and_out_of_order() -> None:
    _, run = run_with(offline_per_device_hour=4.0, offline_s=(20.0, 60.0))
    labels = [t for t in run.truth if t["kind"] == "offline"]
    assert labels
    for label in labels:
        mine = [
            (json.loads(p), at)
            for (d, p), at in zip(run.messages, run.sent_at, strict=True)
            if d == label["device_id"]
            and label["start_ms"] <= json.loads(p)["ts"] <= label["end_ms"]
        ]
        assert len(mine) == label["params"]["buffered"]
        assert all(at == label["params"]["flushed_ms"] for _, at in mine), "sent together, late"
        seqs = [r["seq"] for r, _ in mine]
        if len(seqs) > 3:
            assert seqs != sorted(seqs), "flushed out of order"
        assert all(r["sent"] == label["params"]["flushed_ms"] for r, _ in mine)


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_rates_outside_zero_to_one_are_refused(rate: float) -> None:
    from fleetwatch.simulator.errors import ScenarioError

    with pytest.raises(ScenarioError):
        MisbehaviourSpec(duplicate_rate=rate)
