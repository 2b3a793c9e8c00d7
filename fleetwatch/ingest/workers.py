"""`fleetwatch gateway --workers N`: N gateway processes sharing the MQTT load.

Each worker joins the same MQTT v5 shared-subscription group with a stable client id
(``{client_id}-{index}``) and a persistent session, so a worker that dies and comes back under
the same id receives what the broker queued for it. The supervisor restarts a worker that exits
unexpectedly, and on SIGTERM passes the signal on and waits for every worker to finish cleanly.
The workers count their metrics into files the supervisor serves the sum of
(:mod:`fleetwatch.ingest.metrics`).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from pathlib import Path

from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.gateway import Gateway
from fleetwatch.ingest.metrics import (
    MULTIPROCESS_ENV,
    exported,
    metrics_dir,
    supervisor_registry,
    worker_gone,
)
from fleetwatch.runtime import fleetwatch_process

logger = logging.getLogger(__name__)

RESTART_DELAY_S = 1.0
STOP_TIMEOUT_S = 60.0


def worker_client_id(client_id: str, index: int) -> str:
    return f"{client_id}-{index}"


def retire_surplus(settings: Settings, workers: int, stop: threading.Event) -> list[int]:
    """If fewer workers run than last time, drain and end the sessions of the ones removed:
    the broker keeps dealing a shared subscription's messages to an offline member's
    persistent session, so a worker that never comes back would strand them."""
    state = settings.run_path / "gateway" / "workers"
    try:
        previous = int(state.read_text())
    except (OSError, ValueError):
        previous = workers
    retired: list[int] = []
    for index in range(workers, previous):
        if stop.is_set():
            return retired
        gateway = Gateway(settings, client_id=worker_client_id(settings.gateway.client_id, index))
        gateway.retire(stop)
        retired.append(index)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(str(workers))
    return retired


def _start(index: int, metrics: Path | None) -> subprocess.Popen[bytes]:
    env = None if metrics is None else {MULTIPROCESS_ENV: str(metrics)}
    return fleetwatch_process("gateway", "--worker-index", str(index), env=env)


def supervise(workers: int, stop: threading.Event, metrics: Path | None = None) -> int:
    """Run ``workers`` gateway processes until ``stop``; returns how many restarts were needed.
    ``metrics``: the folder where the workers keep their figures (none: not kept)."""
    procs = {i: _start(i, metrics) for i in range(workers)}
    logger.info("started %d gateway workers: pids %s", workers, [p.pid for p in procs.values()])
    restarts = 0
    while not stop.wait(0.5):
        for index, proc in list(procs.items()):
            if proc.poll() is not None and not stop.is_set():
                logger.error(
                    "gateway worker %d (pid %d) exited with %s; restarting",
                    index,
                    proc.pid,
                    proc.returncode,
                )
                if metrics is not None:
                    worker_gone(proc.pid, metrics)
                if stop.wait(RESTART_DELAY_S):
                    break
                procs[index] = _start(index, metrics)
                restarts += 1
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for index, proc in procs.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.error(
                "gateway worker %d did not stop in %.0fs; killing it", index, STOP_TIMEOUT_S
            )
            proc.kill()
            proc.wait()
        if metrics is not None:
            worker_gone(proc.pid, metrics)
    return restarts


def supervise_exported(settings: Settings, workers: int, stop: threading.Event) -> int:
    """:func:`supervise`, serving the sum of the workers' metrics on
    ``gateway.metrics_port`` (unless it is 0), and the readiness of them all."""
    if not settings.gateway.metrics_port:
        return supervise(workers, stop)
    kept = metrics_dir(settings)
    with exported(settings, supervisor_registry(kept), workers):
        return supervise(workers, stop, kept)
