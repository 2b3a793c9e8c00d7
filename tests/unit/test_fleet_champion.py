"""The scorer follows a scope's champion fleet model: the ``fleet:{scope}`` record on
``model.params``, and how the scorer's pure core uses it per ``score.fleet_model``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.fleet import fleet_key, fleet_scope, scope_of_metrics
from fleetwatch.contracts.model_params import encode_champion
from fleetwatch.fleet.model import compose
from fleetwatch.fleet.pca import pool_pca
from fleetwatch.fleet.publish import pooled_by_scope
from fleetwatch.fleet.tails import field_of, pool_tails
from fleetwatch.models import params
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.scorer.detectors import (
    FleetModel,
    borrow_tails,
    fleet_model,
    fleet_params,
    fleet_prior,
    members_for,
)
from fleetwatch.streaming.scorer.device_state import DeviceScoringState, new_state
from fleetwatch.streaming.scorer.device_step import Policy, Role, process

T0 = 1_763_700_000_000
POLICY = Policy(
    session_gap_ms=300_000,
    min_readings=1,
    clear_readings=3,
    baseline=FixedBaseline(bands={"temperature": (21.0, 8.0)}),
)
SCOPE = "humidity_temperature"


def correlated(n: int, seed: int, start_ms: int = T0) -> pd.DataFrame:
    """Humidity following temperature (long form), temperature swinging over 20 minutes."""
    rng = np.random.default_rng(seed)
    t = start_ms + np.arange(n) * 1000
    temp = 21 + 3 * np.sin(np.arange(n) / 190) + rng.normal(0, 0.2, n)
    hum = 80 - 1.5 * temp + rng.normal(0, 0.2, n)
    return pd.concat(
        [
            pd.DataFrame({"event_ms": t, "metric": "temperature", "value": temp}),
            pd.DataFrame({"event_ms": t, "metric": "humidity", "value": hum}),
        ]
    ).sort_values("event_ms", kind="stable")


def champion_json(model_version: int = 3, version: int = 1) -> str:
    pca = PcaDetector()
    data = correlated(1200, seed=1)
    for start in range(0, len(data), 200):
        pca.learn(data.iloc[start : start + 200])
    return encode_champion(
        SCOPE, "fleetwatch-" + SCOPE, model_version, pca.to_params(), version, T0
    )


def readings(rows: list[tuple[int, float, float]], start_ms: int) -> pd.DataFrame:
    """(seq, temperature, humidity) in the scorer's long form, a second apart."""
    out = []
    for seq, temp, hum in rows:
        for metric, value in (("temperature", temp), ("humidity", hum)):
            ev = start_ms + seq * 1000
            out.append(
                {
                    "seq": seq,
                    "event_ms": ev,
                    "device_event_ms": ev,
                    "device_sent_ms": ev,
                    "received_ms": ev + 20,
                    "clock_offset_ms": 0,
                    "firmware": None,
                    "status": None,
                    "metric": metric,
                    "value": value,
                }
            )
    return pd.DataFrame(out)


def lookup_of(record: str) -> Any:
    best = fleet_params([record])
    assert best is not None
    model = fleet_model(best[2], best[1])
    assert model is not None
    return lambda scope: model if scope == SCOPE else None


# normal for the fleet (humidity = 80 - 1.5·21 = 48.5), then humidity off the line while
# temperature stays in the fixed baseline's band: only the multivariate model can see it
BROKEN = [(0, 21.0, 48.6), (1, 21.1, 48.3), (2, 21.0, 60.0), (3, 21.0, 61.0)]


def alerts_of(
    policy: Policy, lookup: Any, params_json: str | None = None, version: int = 0
) -> list[dict[str, Any]]:
    state: DeviceScoringState | None = (
        None if version == 0 else {**new_state(), "params_version": version}
    )
    _, out = process(
        "d1", state, params_json, readings(BROKEN, T0 + 3_600_000), 0, T0 + 10**9, policy, lookup
    )
    return [json.loads(v) for role, v in out.records if role == Role.ALERTS]


def test_keys_and_scopes() -> None:
    assert fleet_scope(fleet_key(SCOPE)) == SCOPE
    assert fleet_scope("d-17") is None
    assert scope_of_metrics(["temperature", "humidity"]) == SCOPE


def test_the_newest_champion_record_wins_and_bad_ones_are_skipped() -> None:
    older, newer = champion_json(3, version=1), champion_json(2, version=2)  # a rollback
    best = fleet_params(["{not json", newer, older, json.dumps({"version": 9})])
    assert best is not None
    assert best[0] == 2
    assert best[2] == f"fleetwatch-{SCOPE}/2"
    assert PcaDetector.from_params(params.loads(best[1])).model() is not None


def test_a_device_without_parameters_is_scored_by_the_champion() -> None:
    lookup = lookup_of(champion_json())
    found = alerts_of(POLICY, lookup)
    pca = [a for a in found if a["detector"] == "pca"]
    assert pca
    assert pca[0]["status"] == "open"
    assert {a["model"] for a in pca} == {f"fleetwatch-{SCOPE}/3"}
    assert Alert.model_validate(pca[0]).model == f"fleetwatch-{SCOPE}/3"
    # without a champion (or with the fleet model off) the fixed baseline sees nothing
    assert alerts_of(POLICY, lambda scope: None) == []
    assert alerts_of(dataclasses.replace(POLICY, fleet_model="off"), lookup) == []


def own_params(n: int) -> tuple[str, int]:
    detector = default_detector()
    data = correlated(n, seed=5)
    for start in range(0, len(data), 100):
        detector.learn(data.iloc[start : start + 100])
    p = detector.to_params()
    return params.dumps(p), int(p["version"])


@pytest.mark.parametrize(
    ("mode", "n", "expected"),
    [
        ("fallback", 20, f"fleetwatch-{SCOPE}/3"),  # own PCA still warming up: the champion
        ("fallback", 600, None),  # own PCA fitted: its own
        ("always", 600, f"fleetwatch-{SCOPE}/3"),
        ("off", 20, "no pca alert"),
    ],
)
def test_the_policy_says_when_the_champion_replaces_the_own_model(
    mode: str, n: int, expected: str | None
) -> None:
    own, version = own_params(n)
    found = alerts_of(
        dataclasses.replace(POLICY, fleet_model=mode), lookup_of(champion_json()), own, version
    )
    pca = [a for a in found if a["detector"] == "pca"]
    if expected == "no pca alert":
        assert pca == []
        return
    assert pca, found
    assert {a["model"] for a in pca} == {expected}
    assert {a["params_version"] for a in pca} == {version}


def test_fleet_pooling_leaves_the_champions_records_out() -> None:
    own, _ = own_params(600)
    record = {"device_id": "d1", "params": params.loads(own)}
    table = {"d1": record, fleet_key(SCOPE): json.loads(champion_json())}
    pooled = pooled_by_scope(table)
    assert {scope: n for scope, (_, n) in pooled.items()} == {SCOPE: 1}


def test_an_unreadable_champion_is_no_model() -> None:
    assert fleet_model("x/1", "{}") is None
    good = json.dumps(json.loads(champion_json())["params"])
    assert isinstance(fleet_model("x/1", good), FleetModel)


def machine(n: int, seed: int, running: bool, start_ms: int = T0) -> pd.DataFrame:
    """A vibration sensor on a machine that runs (4 mm/s at 1480 rpm) or stands still."""
    rng = np.random.default_rng(seed)
    t = start_ms + np.arange(n) * 1000
    if running:
        rms, rpm = 4.0 + rng.normal(0, 0.3, n), 1480.0 + rng.normal(0, 4.0, n)
    else:
        rms, rpm = 0.15 + np.abs(rng.normal(0, 0.03, n)), np.zeros(n)
    return pd.concat(
        [
            pd.DataFrame({"event_ms": t, "metric": "vibration_rms", "value": rms}),
            pd.DataFrame({"event_ms": t, "metric": "rpm", "value": rpm}),
        ]
    ).sort_values("event_ms", kind="stable")


def scorer_rows(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.reset_index(drop=True)
    out["seq"] = (out["event_ms"] - out["event_ms"].min()) // 1000
    for column in ("device_event_ms", "device_sent_ms"):
        out[column] = out["event_ms"]
    out["received_ms"] = out["event_ms"] + 20
    out["clock_offset_ms"] = 0
    out["firmware"] = out["status"] = None
    return out


def test_a_machine_stopping_as_others_of_its_kind_do_is_no_alert() -> None:
    """A machine whose own model has only seen it running stops: every metric moves at once.
    The fleet (one machine running, one stopped) knows that state, so no alert; a reading
    no machine of the fleet gives (running fast at a standstill's vibration) still alerts."""
    learned = 900
    own = default_detector()
    history = machine(learned, seed=3, running=True)
    for start in range(0, len(history), 200):
        own.learn(history.iloc[start : start + 200])
    own_json, version = params.dumps(own.to_params()), int(own.to_params()["version"])
    devices = {
        "run": PcaDetector().learn(machine(600, seed=4, running=True)).to_params(),
        "still": PcaDetector().learn(machine(600, seed=5, running=False)).to_params(),
    }
    champion = FleetModel(
        "fleetwatch-rpm_vibration_rms/1", PcaDetector.from_params(pool_pca(devices))
    )
    stop_ms = T0 + learned * 1000
    stopped = scorer_rows(machine(30, seed=6, running=False, start_ms=stop_ms))
    broken = stopped.copy()
    broken.loc[broken["metric"] == "rpm", "value"] = 1480.0  # full speed, yet no vibration

    def alerts(rows: pd.DataFrame, lookup: Any) -> list[dict[str, Any]]:
        state: DeviceScoringState = {**new_state(), "params_version": version}
        _, out = process("m1", state, own_json, rows, 0, stop_ms + 10**6, POLICY, lookup)
        return [json.loads(v) for role, v in out.records if role == Role.ALERTS]

    def fleet(scope: str) -> FleetModel | None:
        return champion if scope == "rpm_vibration_rms" else None

    alone = alerts(stopped, None)
    assert [(a["metric"], a["detector"], a["status"]) for a in alone][:1] == [
        ("*", "state", "open")
    ]
    assert alerts(stopped, fleet) == []
    assert [a["status"] for a in alerts(broken, fleet)][:1] == ["open"]


def test_a_champion_of_the_current_shape_scores_as_one_of_the_shape_before() -> None:
    old = json.loads(champion_json())
    new = encode_champion(SCOPE, old["model"], 3, compose(old["params"], {}), 1, T0)
    assert json.loads(new)["kind"] == "fleet"
    assert alerts_of(POLICY, lookup_of(new)) == alerts_of(POLICY, lookup_of(champion_json()))


def test_a_champion_of_tails_alone_replaces_no_member_and_lends_its_tails() -> None:
    """A scope of single-metric devices: pooled tails, no multivariate part."""
    own = default_detector()
    for start in range(0, 600, 100):
        own.learn(
            pd.DataFrame(
                {
                    "event_ms": T0 + np.arange(start, start + 100) * 1000,
                    "metric": "temperature",
                    "value": 21.0 + np.random.default_rng(start).normal(0, 0.2, 100),
                }
            )
        )
    pooled = pool_tails([own.to_params()])
    assert pooled[field_of("level")], "the level member's tail is pooled"
    record = encode_champion(
        "temperature", "fleetwatch-temperature", 1, compose(None, pooled), 1, T0
    )
    found = fleet_params([record])
    assert found is not None
    champion = fleet_model(found[2], found[1])
    assert champion is not None
    assert champion.detector is None
    for mode in ("fallback", "always"):
        members = members_for(own, mode, champion)
        assert members is not None
        assert [label for _, label in members] == [None] * len(own.members())
        borrow_tails(members, champion)
        level = next(m for m, _ in members if m.kind == "level")
        assert isinstance(level, LevelShiftDetector)
        assert level._fleet is champion.tails["level"]
    assert members_for(None, "always", champion) is None, "no own model: the fixed baseline"
    assert fleet_prior(champion) is None
