"""Latency of the HTTP API under a fixed request rate, against a store of 10,000 devices and
100,000 alert episodes (SQLite, as the API runs by default).

The API runs in uvicorn (``--workers`` processes, no Kafka: the store is filled beforehand);
a load generator in a separate process sends an open-loop stream at ``--rate`` requests per
second for ``--seconds``: half ``GET /devices/{id}``, half ``GET /alerts?device={id}&limit=20``,
random devices, with a read key. Latency is measured from each request's scheduled time, so a
stalled server is not hidden (no coordinated omission). The baseline in the same run is
``GET /healthz`` at the same rate (the framework, auth-free, no database).

    python bench/micro/api.py [--devices 10000] [--alerts 100000] [--rate 500] [--seconds 15]
                        [--workers 2]

Last line: {"rps", "p50_ms", "p99_ms", "errors", "workers", "requests", "devices", "alerts",
"target_rps", "baseline_p50_ms", "baseline_p99_ms", "devices_p99_ms", "alerts_p99_ms",
"send_lag_p99_ms", "loadavg_1m"}: ``send_lag_p99_ms`` is the load generator's own lateness (from
a request's due time to its task running), a part of the latency that is not the API's;
``loadavg_1m`` the machine's load average before and after (other work on it moves the tail).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import ROOT, free_port, load_avg_1m, percentile, write_results
from fleetwatch.contracts.alerts import Alert, alert_id, event_id
from fleetwatch.contracts.devices import DeviceState
from fleetwatch.contracts.settings import ApiSettings, Settings, WebhookSettings
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.ingest import Batch, write
from fleetwatch.serving.store.keys import create_key
from fleetwatch.serving.tables import DeviceRow, DeviceTagRow


def device_ids(n: int) -> list[str]:
    return [f"dev-{i:05d}" for i in range(n)]


def fill(url: str, devices: int, alerts: int) -> str:
    """A store with ``devices`` registered devices (state, two tags) and ``alerts`` episodes
    spread evenly over them; returns a read key."""
    store = Store(url)
    ids = device_ids(devices)
    per_device = max(1, alerts // devices)
    base = 1_763_750_000_000
    with store.session() as session, session.begin():
        session.add_all(
            DeviceRow(
                device_id=d,
                kind="probe",
                name=None,
                attributes={},
                registered=True,
                created_ms=base,
                updated_ms=base,
            )
            for d in ids
        )
        session.add_all(DeviceTagRow(device_id=d, tag=f"site-{i % 10}") for i, d in enumerate(ids))
    for start in range(0, devices, 500):
        chunk = ids[start : start + 500]
        batch = Batch()
        for d in chunk:
            batch.states.append(
                DeviceState(
                    device_id=d,
                    kind="probe",
                    status="ok",
                    last_seen_ms=base,
                    last_received_ms=base,
                    last_seq=1,
                    last_values={"temperature": 21.0},
                    open_alerts=[],
                    params_version=1,
                    clock_offset_ms=0,
                    updated_ms=base,
                )
            )
            for k in range(per_device):
                t = base + k * 60_000
                aid = alert_id(d, "temperature", "seasonal", t)
                batch.alerts.append(
                    Alert(
                        alert_id=aid,
                        device_id=d,
                        metric="temperature",
                        detector="seasonal",
                        params_version=1,
                        seq=k,
                        event_ms=t,
                        received_ms=t + 5,
                        detected_ms=t + 200,
                        value=40.0,
                        expected=21.0,
                        band=5.0,
                        score=0.9,
                        reason="temperature=40 outside 21±5",
                        status="resolve" if k % 2 else "open",
                        start_ms=t,
                        revision=1 if k % 2 else 0,
                        event_id=event_id(aid, 1 if k % 2 else 0),
                    )
                )
        with store.session() as session, session.begin():
            write(session, batch, base)
    with store.session() as session, session.begin():
        _, key = create_key(session, "bench", ["read"], base)
    store.close()
    return key


class NullPublisher:
    """No Kafka in this bench: commands are not sent."""

    def publish(self, command: Any) -> None:
        raise NotImplementedError("the API bench sends no commands")

    def reachable(self) -> bool:
        return True

    def lift_quarantine(self, device_id: str, lifted_ms: int) -> None:
        pass

    def publish_rule(self, rule_id: str, value: bytes | None) -> None:
        raise NotImplementedError("the API bench writes no rules")

    def close(self) -> None:
        pass


def factory() -> Any:
    """The app uvicorn's workers import (``bench.micro.api:factory``); the store URL comes
    from the env."""
    from fleetwatch.serving.app import create_app

    settings = Settings(
        _env_file=None,
        run_dir=Path(os.environ["BENCH_RUN_DIR"]),
        api=ApiSettings(
            database_url=os.environ["BENCH_DB_URL"],
            key_cache_s=60,
            webhooks=WebhookSettings(enabled=False),
        ),
    )
    return create_app(settings, materialise=False, publisher=NullPublisher(), workers=False)


def serve(port: int, workers: int) -> None:
    import uvicorn

    uvicorn.run(
        "bench.micro.api:factory",
        factory=True,
        app_dir=str(ROOT),
        host="127.0.0.1",
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,
    )


async def _load(
    base: str, key: str, paths: list[str], rate: float, seconds: float, conns: int = 64
) -> dict[str, Any]:
    """Open-loop load: request i is due at i / rate; its latency counts from then, including
    any wait for a free connection. A minimal HTTP/1.1 keep-alive client (a few µs of CPU per
    request), so that the generator is not what limits the rate."""
    host, port = base.removeprefix("http://").split(":")
    total = int(rate * seconds)
    latencies: list[float] = [0.0] * total
    lags: list[float] = [0.0] * total  # the generator's own lateness: due → the task runs
    errors = 0
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(conns):
        pool.put_nowait(await asyncio.open_connection(host, int(port)))

    async def one(i: int, due: float) -> None:
        nonlocal errors
        lags[i] = time.perf_counter() - due
        reader, writer = await pool.get()
        request = (
            f"GET {paths[i % len(paths)]} HTTP/1.1\r\nHost: {host}\r\nX-API-Key: {key}\r\n\r\n"
        )
        try:
            writer.write(request.encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if head[9:12] != b"200":
                errors += 1
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
            writer.close()
            reader, writer = await asyncio.open_connection(host, int(port))
        latencies[i] = time.perf_counter() - due
        pool.put_nowait((reader, writer))

    started = time.perf_counter()
    tasks = []
    for i in range(total):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    took = time.perf_counter() - started
    while not pool.empty():
        pool.get_nowait()[1].close()
    ms = np.array(latencies) * 1000
    lag_ms = np.array(lags) * 1000
    return {
        "requests": total,
        "rps": round(total / took, 1),
        "p50_ms": percentile(ms, 50, 2),
        "p99_ms": percentile(ms, 99, 2),
        "errors": errors,
        "send_lag_p50_ms": percentile(lag_ms, 50, 2),
        "send_lag_p99_ms": percentile(lag_ms, 99, 2),
    }


def load(argv: list[str]) -> None:
    """The load generator process: prints one JSON line per phase."""
    base, key, devices, rate, seconds = (
        argv[0],
        argv[1],
        int(argv[2]),
        float(argv[3]),
        float(argv[4]),
    )
    rng = random.Random(7)
    ids = device_ids(devices)
    mixed: list[str] = []
    for _ in range(int(rate * seconds)):
        d = rng.choice(ids)
        mixed.append(f"/devices/{d}" if len(mixed) % 2 == 0 else f"/alerts?device={d}&limit=20")
    run = uvloop.run
    run(_load(base, key, mixed[:500], rate / 2, 500 / (rate / 2)))  # warm-up, not counted
    baseline = run(_load(base, key, ["/healthz"], rate, seconds))
    api = run(_load(base, key, mixed, rate, seconds))
    per_route = {}
    for name, prefix in (("devices", "/devices/"), ("alerts", "/alerts?")):
        only = [p for p in mixed if p.startswith(prefix)]
        per_route[name] = run(_load(base, key, only, rate / 2, seconds / 2))
    print(json.dumps({"baseline": baseline, "api": api, "per_route": per_route}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--alerts", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    load_before = load_avg_1m()
    with tempfile.TemporaryDirectory(prefix="fleetwatch-bench-api-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'api.db'}"
        started = time.perf_counter()
        key = fill(url, args.devices, args.alerts)
        print(
            f"store: {args.devices} devices, {args.alerts} alerts in "
            f"{time.perf_counter() - started:.1f}s"
        )
        port = free_port()
        env = {"BENCH_DB_URL": url, "BENCH_RUN_DIR": tmp}
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), str(args.workers)],
            env=_env(env),
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_up(base)
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--load",
                    base,
                    key,
                    str(args.devices),
                    str(args.rate),
                    str(args.seconds),
                ],
                capture_output=True,
                text=True,
                check=True,
                env=_env({}),
            )
        finally:
            server.terminate()
            server.wait(30)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    base_r, api_r, routes = result["baseline"], result["api"], result["per_route"]
    print(
        f"baseline GET /healthz at {args.rate:.0f}/s: {base_r['rps']} req/s, "
        f"p50 {base_r['p50_ms']} ms, p99 {base_r['p99_ms']} ms, errors {base_r['errors']}"
    )
    print(
        f"GET /devices/{{id}} + GET /alerts?device= at {args.rate:.0f}/s: {api_r['rps']} req/s, "
        f"p50 {api_r['p50_ms']} ms, p99 {api_r['p99_ms']} ms, errors {api_r['errors']}"
    )
    print(
        f"  the load generator's own lateness (due → sending): "
        f"p50 {api_r['send_lag_p50_ms']} ms, p99 {api_r['send_lag_p99_ms']} ms"
    )
    for name, r in routes.items():
        print(
            f"  {name} alone at {args.rate / 2:.0f}/s: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms"
        )
    figures = {
        "rps": api_r["rps"],
        "p50_ms": api_r["p50_ms"],
        "p99_ms": api_r["p99_ms"],
        "errors": api_r["errors"] + base_r["errors"],
        "workers": args.workers,
        "requests": api_r["requests"],
        "devices": args.devices,
        "alerts": args.alerts,
        "target_rps": args.rate,
        "baseline_p50_ms": base_r["p50_ms"],
        "baseline_p99_ms": base_r["p99_ms"],
        "devices_p99_ms": routes["devices"]["p99_ms"],
        "alerts_p99_ms": routes["alerts"]["p99_ms"],
        "send_lag_p99_ms": api_r["send_lag_p99_ms"],
        "loadavg_1m": [load_before, load_avg_1m()],
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


def _env(extra: dict[str, str]) -> dict[str, str]:
    return dict(os.environ) | {"PYTHONPATH": str(ROOT)} | extra


def _wait_up(base: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the API did not answer on {base}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--load":
        load(sys.argv[2:])
    else:
        main()
