from pathlib import Path

import pytest

from fleetwatch.simulator.errors import ScenarioError
from fleetwatch.simulator.recording import read_header, record, recorded
from fleetwatch.simulator.scenario import Scenario, load_scenario
from tests.unit.sim_helpers import simulate

SCENARIO = """
devices = 5
kinds = { temperature = 2, battery = 1 }
rate = 0.5
count = 40
seed = 7
qos = 0

[anomalies]
per_device_hour = 120.0
mix = { spike = 1, stuck = 1 }

[misbehaviour]
duplicate_rate = 0.05
skew_s = [60.0, 120.0]
"""


def test_a_scenario_file_describes_a_run_and_options_override_it(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    assert (scenario.devices, scenario.rate, scenario.count, scenario.qos) == (5, 0.5, 40, 0)
    assert scenario.anomalies.mix == {"spike": 1.0, "stuck": 1.0}
    assert scenario.misbehaviour.skew_s == (60.0, 120.0)
    run = simulate(scenario)
    labels = {t["kind"] for t in run.truth if t["class"] != "normal"}
    assert labels <= {"spike", "stuck", "duplicate"}
    bigger = scenario.with_overrides(devices=9, seed=None, spike_every=3)
    assert (bigger.devices, bigger.seed, bigger.anomalies.spike_every) == (9, 7, 3)


@pytest.mark.parametrize(
    "text",
    [
        "devices = 0",
        "kinds = { toaster = 1 }",
        "colour = 'blue'",
        "[anomalies]\nmix = { meteor = 1 }",
        "qos = 2",
        "devices = [",
    ],
)
def test_bad_scenarios_are_refused_with_a_reason(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError):
        load_scenario(path)


def test_a_recording_holds_the_exact_run(tmp_path: Path) -> None:
    scenario = Scenario(devices=3, rate=2, count=30, seed=4).with_overrides(per_device_hour=300.0)
    path = tmp_path / "run.jsonl"
    start = 1_700_000_000_000
    messages, truths = record(scenario, path, start)
    again = simulate(scenario, start)
    items = list(recorded(path))
    payloads = [(i.device_id, i.payload) for i in items if not isinstance(i, dict)]
    assert payloads == again.messages
    assert len(payloads) == messages
    assert [i for i in items if isinstance(i, dict)] == again.truth
    assert truths == len(again.truth) > 0
    assert read_header(path) == (scenario, start)


def test_a_recording_needs_an_end(tmp_path: Path) -> None:
    from fleetwatch.simulator.errors import SimulatorError

    with pytest.raises(SimulatorError):
        record(Scenario(), tmp_path / "x.jsonl", 0)
