"""False alerts of a healthy simulated fleet: long recordings of every device kind with realistic
noise and no anomaly at all, each kind's devices scored as one fleet; every alert is a false one.

Each kind of :data:`~fleetwatch.simulator.kinds.KINDS` is ``--devices`` simulated devices
(:class:`~fleetwatch.simulator.engine.Fleet`, the simulator's own engine and noise: daily and load
cycles, machines starting and stopping, benign level changes and noise bursts; no anomaly, no
misbehaviour) reading every ``1 / --rate`` seconds for ``--days`` simulated days. A kind's
readings are scored by :func:`~fleetwatch.filemode.scoring.detect_frame` with ``fleet`` on (what
``fleetwatch detect --fleet`` runs: the scorer's per-device step, each scope's fleet model pooled
from the devices as production pools it), at each budget of ``--budgets``
(``score.false_alerts_per_device_day``).

An alert is an episode: a run of consecutive alerting rows of one device. Printed per kind and
budget: alerts a device-day with the exact 95 % Poisson interval over the kind's device-days and
the budget *held*, *broken* or *undecided* by it (:mod:`~fleetwatch.evaluation.rates`); the same
after the first hour (the fleet's first pools and the devices' first tails); how many opened
within a minute of a benign event the simulator labelled normal; and the member that carried
each (the reason's last word).

    python bench/quality/healthy_fleet.py [--devices 25] [--days 1] [--rate 0.1] [--seed 0]
        [--budgets 1,0.1,0.01] [--kinds temperature,vibration,...]

Last line: {"budget": the first budget, "kinds": {kind: alerts a device-day at it}, "by_budget":
{budget: {"kinds", "intervals": {kind: [low, high]}, "broken", "undecided", "held" (kinds),
"after_hour1": {kind: rate}, "near_benign": {kind: alerts}, "members": {kind: {member: alerts}}}},
"exposure_device_days" (per kind), "devices", "days", "rate", "rows", "rows_per_s", "seconds",
"loadavg_1m", "loadavg_1m_end"}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.evaluation.detections import run_starts
from fleetwatch.evaluation.rates import rate_interval, verdict
from fleetwatch.filemode.scoring import detect_frame
from fleetwatch.models.registry import Tuning, detector_factory
from fleetwatch.simulator.engine import Fleet
from fleetwatch.simulator.kinds import KINDS
from fleetwatch.simulator.scenario import Scenario

START_MS = 1_767_571_200_000
"""2026-01-05T00:00:00Z: a day starts at midnight, so its daily cycles are whole."""
DAY_MS = 86_400_000
HOUR_MS = 3_600_000
NEAR_BENIGN_MS = 60_000
"""An alert opening within a minute of a labelled benign event is counted as near it."""
STEP_MS = 60_000
"""Simulated time advanced per engine step: the engine returns every reading due by then."""


def recording(
    kind: str, devices: int, days: float, rate: float, seed: int
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """One kind's healthy fleet: readings (``device_id``, ``timestamp`` in epoch ms, then the
    kind's metrics), each device's rows together in time order, and the benign events the
    simulator labelled."""
    scenario = Scenario(
        devices=devices, kinds={kind: 1.0}, rate=rate, duration_s=days * 86_400, seed=seed
    )
    fleet = Fleet(scenario, range(devices), START_MS, lambda device: device)
    metrics = list(KINDS[kind].metrics)
    ids: list[str] = []
    rows: list[list[float]] = []
    benign: list[dict[str, Any]] = []
    decode = msgspec.json.Decoder()
    now = START_MS
    while not fleet.finished:
        now += STEP_MS
        tick = fleet.step(now)
        benign.extend(t for t in tick.truth if t.get("class") == "normal")
        for device, payload in tick.messages:
            message = decode.decode(payload)
            values = message["metrics"]
            ids.append(device)
            rows.append([message["ts"], *(values.get(m, np.nan) for m in metrics)])
    frame = pd.DataFrame(rows, columns=["timestamp", *metrics])
    frame.insert(0, "device_id", ids)
    frame["timestamp"] = frame["timestamp"].astype(np.int64)
    frame = frame.sort_values(["device_id", "timestamp"], kind="stable", ignore_index=True)
    return frame, benign


def member_of(reason: str) -> str:
    """The member a reason names last: ``(p≈…, seasonal)`` gives ``seasonal``; a device-wide
    move, ``state``."""
    if reason.startswith("every metric moved at once"):
        return "state"
    tail = reason.rsplit(",", 1)[-1].strip(" )")
    return tail if tail.isidentifier() else "other"


def openings(scored: pd.DataFrame) -> pd.DataFrame:
    """The rows at which a device's alert opens (each device's rows contiguous, in order)."""
    flags = scored["alert"].to_numpy(dtype=bool)
    new_device = scored["device_id"].ne(scored["device_id"].shift()).to_numpy()
    starts = run_starts(flags) | (flags & new_device)
    return scored.loc[starts, ["device_id", "timestamp", "reason"]]


def near_benign(opened: pd.DataFrame, benign: list[dict[str, Any]]) -> int:
    """How many openings come within :data:`NEAR_BENIGN_MS` of a benign event of their device
    (from its start to a minute after its end)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for event in benign:
        end = event.get("end_ms") or event["start_ms"]
        spans.setdefault(event["device_id"], []).append((event["start_ms"], end))
    count = 0
    for device, at in zip(opened["device_id"], opened["timestamp"], strict=True):
        if any(
            lo - NEAR_BENIGN_MS <= at <= hi + NEAR_BENIGN_MS for lo, hi in spans.get(device, ())
        ):
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=25, help="devices of each kind")
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=0.1, help="readings a second a device")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", default="1,0.1,0.01", help="comma-separated budgets")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated device kinds")
    args = parser.parse_args()
    budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    load_start = os.getloadavg()[0]
    began = time.perf_counter()
    exposure = args.devices * args.days
    later_exposure = args.devices * max(args.days - HOUR_MS / DAY_MS, 1e-9)
    engine_s, total_rows = 0.0, 0
    by_budget: dict[str, dict[str, Any]] = {f"{b:g}": {} for b in budgets}
    for kind in kinds:
        seed = args.seed * 100 + list(KINDS).index(kind)  # a kind's recording, whatever --kinds
        frame, benign = recording(kind, args.devices, args.days, args.rate, seed)
        metrics = list(KINDS[kind].metrics)
        for budget in budgets:
            make = detector_factory(None, Tuning(false_alerts_per_day=budget))
            started = time.perf_counter()
            scored = detect_frame(frame, "timestamp", "device_id", metrics, make=make, fleet=True)
            engine_s += time.perf_counter() - started
            total_rows += len(frame)
            opened = openings(scored)
            count = len(opened)
            rate = count / exposure
            (low, high), judged = rate_interval(count, exposure), verdict(count, exposure, budget)
            later = int((opened["timestamp"] >= START_MS + HOUR_MS).sum()) / later_exposure
            near = near_benign(opened, benign)
            members = Counter(member_of(str(r)) for r in opened["reason"])
            entry = by_budget[f"{budget:g}"]
            entry.setdefault("kinds", {})[kind] = round(rate, 4)
            entry.setdefault("intervals", {})[kind] = [round(low, 4), round(high, 4)]
            entry.setdefault(judged, []).append(kind)
            entry.setdefault("after_hour1", {})[kind] = round(later, 4)
            entry.setdefault("near_benign", {})[kind] = near
            entry.setdefault("members", {})[kind] = dict(members.most_common())
            print(
                f"budget {budget:<5g} {kind:<12} {rate:7.3f} alerts per device-day "
                f"[{low:.2f}, {high:.2f}] {judged}; after hour 1: {later:.3f}; "
                f"near a benign event: {near} of {count}; by member: "
                f"{', '.join(f'{m} {n}' for m, n in members.most_common()) or 'none'}",
                flush=True,
            )
    for entry in by_budget.values():
        for judged in ("held", "broken", "undecided"):
            entry.setdefault(judged, [])
    result = {
        "budget": budgets[0],
        "kinds": by_budget[f"{budgets[0]:g}"]["kinds"],
        "by_budget": by_budget,
        "exposure_device_days": exposure,
        "devices": args.devices,
        "days": args.days,
        "rate": args.rate,
        "seed": args.seed,
        "rows": total_rows,
        "rows_per_s": round(total_rows / engine_s) if engine_s else None,
        "seconds": round(time.perf_counter() - began, 1),
        "loadavg_1m": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    write_results(__file__, result)


if __name__ == "__main__":
    main()
