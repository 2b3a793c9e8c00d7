import itertools

from fleetwatch.contracts.commands import Command
from fleetwatch.simulator.devices import command_for, obey
from fleetwatch.simulator.engine import Fleet, Tick
from fleetwatch.simulator.scenario import AnomalySpec, Scenario

T0 = 1_700_000_000_000


def fleet(**kw: object) -> Fleet:
    return Fleet(Scenario(devices=2, rate=1, **kw), range(2), T0, str)  # type: ignore[arg-type]


def cmd(name: str, **args: object) -> Command:
    return Command(
        command_id=f"c-{name}", device_id="sensor-0001", name=name, args=args, issued_ms=T0
    )


def emitted_ts(f: Fleet, until: int, device: str = "sensor-0001") -> list[int]:
    out = []
    now = f.next_due_ms()
    while now <= until:
        for d, payload in f.step(now).messages:
            if d == device:
                out.append(int(payload.split(b'"ts":')[1].split(b",")[0]))
        now = f.next_due_ms()
    return out


def test_set_interval_changes_the_reporting_interval() -> None:
    f = fleet(noise="gaussian")
    ack = obey(f, cmd("set_interval", interval_ms=250), T0, Tick())
    assert (ack.status, ack.command_id) == ("ok", "c-set_interval")
    ts = emitted_ts(f, T0 + 3000)
    assert {b - a for a, b in itertools.pairwise(ts)} == {250}


def test_set_interval_keeps_the_sampling_jitter_around_the_new_interval() -> None:
    f = fleet(kinds={"battery": 1.0})
    obey(f, cmd("set_interval", interval_ms=250), T0, Tick())
    ts = emitted_ts(f, T0 + 20_000)
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    jitter = f.noises[0].jitter
    assert all(250 * (1 - jitter) - 1 < g < 250 * (1 + jitter) + 1 for g in gaps)
    assert len(set(gaps)) > 1
    assert abs((ts[-1] - ts[0]) / len(gaps) - 250) < 250 * jitter / len(gaps) + 1e-9


def test_set_interval_without_a_valid_interval_fails() -> None:
    assert obey(fleet(), cmd("set_interval", interval_ms="fast"), T0, Tick()).status == "failed"
    assert obey(fleet(), cmd("set_interval", interval_ms=1), T0, Tick()).status == "failed"


def test_reboot_silences_the_device_then_it_comes_back() -> None:
    f = fleet(reboot_s=5.0)
    assert obey(f, cmd("reboot"), T0 + 2000, Tick()).status == "ok"
    ts = emitted_ts(f, T0 + 12_000)
    assert not [t for t in ts if T0 + 2000 < t < T0 + 7000]
    assert [t for t in ts if t >= T0 + 7000]


def test_calibrate_clears_an_active_drift() -> None:
    spec = AnomalySpec(per_device_hour=3600.0, mix={"drift": 1.0})
    f = fleet(anomalies=spec)
    emitted_ts(f, T0 + 10_000)
    assert f.active[1].kind == "drift"
    tick = Tick()
    ack = obey(f, cmd("calibrate"), T0 + 10_000, tick)
    assert (ack.status, ack.detail) == ("ok", "drift cleared")
    assert [t["kind"] for t in tick.truth] == ["drift"]
    assert tick.truth[0]["params"]["calibrated"] is True
    assert obey(f, cmd("calibrate"), T0 + 3000, Tick()).detail == "nothing to correct"


def test_unknown_commands_are_answered_with_a_failed_ack() -> None:
    ack = obey(fleet(), cmd("dance"), T0, Tick())
    assert (ack.status, ack.detail) == ("failed", "unknown command 'dance'")


def test_commands_for_other_devices_or_garbage_are_ignored() -> None:
    f = fleet()
    assert command_for(f, "sensor-0001", b"not json") is None
    assert command_for(f, "sensor-0000", cmd("reboot").model_dump_json().encode()) is None
    assert command_for(f, "sensor-0001", cmd("reboot").model_dump_json().encode()) is not None
