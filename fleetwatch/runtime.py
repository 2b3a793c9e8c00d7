"""What every long-running process shares: SIGTERM and SIGINT turned into an event the stages
watch, starting a stage's worker processes, and serving a stage's Prometheus metrics."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import FrameType

from prometheus_client import CollectorRegistry, start_http_server

from fleetwatch.contracts.errors import ConfigurationError

logger = logging.getLogger(__name__)

METRICS_ADDRESS = "0.0.0.0"
"""Where a stage's metrics endpoint listens: every interface, as Prometheus exporters do, so
that a Prometheus on another host or container can scrape it. The figures are counts, rates and
durations, never a device id or a reading."""


def stop_event() -> threading.Event:
    """An event set by the first SIGTERM or SIGINT (call from the main thread)."""
    stop = threading.Event()

    def _handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return stop


def fleetwatch_process(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A ``fleetwatch`` subcommand in a new process on this interpreter (a stage supervising
    its own workers), with ``env`` added to this process's environment."""
    child_env = None if env is None else {**os.environ, **env}
    return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli.main", *args], env=child_env)


@contextmanager
def serve_metrics(registry: CollectorRegistry, port: int, setting: str) -> Iterator[None]:
    """Serve ``registry`` on ``http://{host}:{port}/metrics`` (any path answers) while the
    block runs; ``port`` 0: not at all. The server's thread is stopped and joined on the way
    out. A port that cannot be bound stops the stage at start, naming ``setting``."""
    if port == 0:
        yield
        return
    try:
        server, thread = start_http_server(port, addr=METRICS_ADDRESS, registry=registry)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on port {port} ({exc.strerror or exc}); "
            f"set {setting} to a free port, or 0 for none"
        ) from exc
    logger.info("metrics on port %d (/metrics)", port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
