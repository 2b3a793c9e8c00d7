"""Detection quality of the whole path: a simulated fleet with labelled anomalies and
misbehaviour, through MQTT → gateway → Kafka → trainer and scorer → ``alerts``, scored by
``fleetwatch sim eval`` against the simulator's truth.

The fleet runs in real time (event times come from the devices' clocks as corrected by the
gateway, so a faster-than-real-time replay would compress them); by default the scenario
``deploy/scenarios/eval-500.toml``: 500 devices, 30 minutes, every anomaly kind, anomalies after
each device's first 5 minutes, clock skew, offline buffering, duplicates and garbage. The
trainer starts with the fleet (nothing learned beforehand): devices are scored with the fixed
baseline until their first parameters arrive. ``--fleet-s`` seconds in (default 120), and
every ``--fleet-every-s`` after (default 60; negative: once), the devices' parameters are pooled
into one fleet model per scope, registered in MLflow and promoted, as an operator's schedule of
``fleetwatch models register-fleet`` and ``promote`` does — the schedule the offline replay
(:mod:`bench.quality.offline`) follows: from then on the scorer knows the states the fleet is
in (a machine stopping for the first time is one of them) and its young streams borrow what
the fleet's devices have learned so far.

    python bench/quality/live.py [--scenario FILE] [--devices N] [--minutes M] [--tolerance S]
        [--fleet-s S] [--fleet-every-s S]

Prints ``sim eval``'s table, then a last line: {"f1", "precision", "recall", "anomalies",
"alerts", "false_alerts", "false_alerts_per_device_day", "delay_p50_s", "delay_p95_s",
"by_kind": {kind: {"f1", "precision", "recall", "anomalies", "delay_p50_s", "delay_p95_s"}}}
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import ROOT, end_gateway_session, isolated_env, stage, wait, write_results
from bench.quality.offline import FLEET_EVERY_S, FLEET_S
from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.registry import model_name
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.simulator.alert_source import read_alerts
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION


def fleetwatch(env: dict[str, str], *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetwatch.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        **kw,
    )


def alive(stages: dict[str, subprocess.Popen[bytes]]) -> None:
    """A stage that exited makes the run worthless: stop at once, naming its log."""
    for name, p in stages.items():
        if p.poll() is not None:
            raise SystemExit(f"bench: the {name} exited with {p.returncode}: see {name}.log")


def ended(process: subprocess.Popen[bytes], within_s: float) -> bool:
    """Whether ``process`` exits within ``within_s`` seconds (waited for, not polled)."""
    try:
        process.wait(max(0.0, within_s))
    except subprocess.TimeoutExpired:
        return False
    return True


def register_fleet(env: dict[str, str], settings: Settings) -> list[str]:
    """As an operator does once the devices have learned: pool their multivariate models into
    one per scope (``models register-fleet``), and make each the champion (``models promote``,
    which publishes it to ``model.params`` for the scorer)."""
    done = fleetwatch(env, "models", "register-fleet")
    if done.returncode != 0:
        raise SystemExit(f"bench: models register-fleet failed: {done.stderr[-2000:]}")
    scopes = [line.split(":")[0] for line in done.stdout.splitlines() if "registered" in line]
    for scope in scopes:
        promoted = fleetwatch(env, "models", "promote", model_name(settings, scope))
        if promoted.returncode != 0:
            raise SystemExit(f"bench: models promote failed: {promoted.stderr[-2000:]}")
    return scopes


def evaluate_run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-quality-"))
    topics, env = isolated_env(settings, tag, run_dir)
    stages = {name: stage(env, run_dir, name, name) for name in ("gateway", "train", "score")}
    truth = run_dir / "truth.jsonl"
    try:
        checkpoint = versioned(run_dir / "checkpoints", "score", PLAN_VERSION)
        wait(lambda: (checkpoint / "commits" / "0").exists(), 240, "the scorer's first batch")
        sim: list[str] = ["sim", "run", "--scenario", str(args.scenario), "--quiet"]
        sim += ["--truth", str(truth), "--prefix", f"q{tag}"]
        if args.devices:
            sim += ["--devices", str(args.devices)]
        if args.minutes:
            sim += ["--duration", str(args.minutes * 60)]
        started = time.monotonic()
        print(f"quality: fleet running ({' '.join(sim[2:])}); logs in {run_dir}", flush=True)
        err = run_dir / "sim.err"
        with err.open("wb") as sink:
            cmd = [sys.executable, "-m", "fleetwatch.cli.main", *sim]
            fleet = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=sink)
            try:
                due = args.fleet_s
                while due >= 0 and not ended(fleet, started + due - time.monotonic()):
                    alive(stages)
                    scopes = register_fleet(env, settings)
                    at = time.monotonic() - started
                    print(f"quality: fleet models promoted at {at:.0f} s: {scopes}", flush=True)
                    # a pooling that overran its slot skips the slots it missed
                    due = max(due + args.fleet_every_s, at) if args.fleet_every_s > 0 else -1.0
                code = fleet.wait()
            finally:
                if fleet.poll() is None:
                    fleet.terminate()
                    fleet.wait(60)
        alive(stages)
        if code != 0:
            raise SystemExit(f"bench: the simulator failed: {err.read_text()[-2000:]}")
        print(f"quality: fleet done in {time.monotonic() - started:.0f} s", flush=True)
        ends = end_offsets(settings.kafka, topics.telemetry_raw)

        def caught_up() -> bool:
            alive(stages)
            done = committed_offsets(checkpoint, topics.telemetry_raw) or {}
            return all(done.get(p, 0) >= end for p, end in ends.items())

        wait(caught_up, 900, "the scorer to catch up")
        time.sleep(5)  # the last batch's alerts are on the topic
        alerts = run_dir / "alerts.jsonl"  # kept for a closer look; the topics are deleted
        events = read_alerts(settings.model_copy(update={"topics": topics}))
        alerts.write_text("".join(json.dumps(a) + "\n" for a in events))
        given = ("--alerts", str(alerts), "--tolerance", str(args.tolerance))
        report = fleetwatch(env, "sim", "eval", str(truth), *given, "--json")
        if report.returncode != 0:
            raise SystemExit(f"bench: sim eval failed: {report.stderr[-2000:]}")
        table = fleetwatch(env, "sim", "eval", str(truth), *given)
        print(table.stdout, flush=True)
        return json.loads(report.stdout)  # type: ignore[no-any-return]
    finally:
        for p in stages.values():
            p.send_signal(signal.SIGTERM)
        for p in stages.values():
            p.wait(180)
        end_gateway_session(settings, env)
        delete_topics(settings.kafka, topics.model_dump().values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "deploy/scenarios/eval-500.toml")
    parser.add_argument("--devices", type=int, default=None, help="override the scenario's")
    parser.add_argument("--minutes", type=float, default=None, help="override the scenario's")
    parser.add_argument("--tolerance", type=float, default=30.0, help="sim eval --tolerance")
    parser.add_argument(
        "--fleet-s",
        type=float,
        default=FLEET_S,
        help="register and promote the fleet models this many seconds in (negative: never)",
    )
    parser.add_argument(
        "--fleet-every-s",
        type=float,
        default=FLEET_EVERY_S,
        help="register and promote them again this often after (negative: once)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = Settings()
    stack = Stack(settings)
    was_up = all(c.pid for c in stack.status())
    stack.up()
    try:
        report = evaluate_run(settings, args)
    finally:
        if not was_up:
            stack.down()
    keep = ("f1", "precision", "recall", "anomalies", "delay_p50_s", "delay_p95_s")
    summary = {
        k: report[k]
        for k in (
            "f1",
            "precision",
            "recall",
            "anomalies",
            "alerts",
            "false_alerts",
            "false_alerts_per_device_day",
            "delay_p50_s",
            "delay_p95_s",
        )
    }
    summary["by_kind"] = {
        kind: {k: r[k] for k in keep} for kind, r in sorted(report["by_kind"].items())
    }
    print(json.dumps(summary))
    write_results(__file__, summary)


if __name__ == "__main__":
    main()
