"""What every long-running process shares: SIGTERM and SIGINT turned into an event the stages
watch, starting a stage's worker processes, and serving a stage's Prometheus metrics with its
health (``/healthz``) and readiness (``/readyz``)."""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from fleetwatch.contracts.errors import ConfigurationError

logger = logging.getLogger(__name__)

METRICS_ADDRESS = "0.0.0.0"
"""Where a stage's metrics endpoint listens: every interface, as Prometheus exporters do, so
that a Prometheus on another host or container can scrape it. The figures are counts, rates and
durations, never a device id or a reading."""


def on_stop_signal(stop: Callable[[], object]) -> None:
    """Call ``stop`` on SIGTERM or SIGINT (install from the main thread). A SIGTERM that comes
    once the interpreter has begun its own shutdown, after the exit handlers, is ignored: there
    Python's handlers are gone, and it would kill with -15 a process about to exit 0. Until
    then a repeat only calls ``stop`` again, and a child process started meanwhile inherits no
    ignored SIGTERM."""

    def _handler(signum: int, frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    atexit.register(_ignore_sigterm)


def _ignore_sigterm() -> None:
    """The last exit handler to run (the first registered): SIGTERM ignored from here on."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def stop_event() -> threading.Event:
    """An event set by the first SIGTERM or SIGINT (call from the main thread)."""
    stop = threading.Event()
    on_stop_signal(stop.set)
    return stop


def fleetwatch_process(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A ``fleetwatch`` subcommand in a new process on this interpreter (a stage supervising
    its own workers), with ``env`` added to this process's environment."""
    child_env = None if env is None else {**os.environ, **env}
    return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli.main", *args], env=child_env)


@dataclass(frozen=True)
class Readiness:
    """Whether a stage can do its work now, and ``detail``: what is and is not ready (a few
    JSON-able entries, the body of ``/readyz`` with ``status``)."""

    ready: bool
    detail: Mapping[str, Any] = field(default_factory=dict)


ReadinessCheck = Callable[[], Readiness]
"""A stage's readiness, asked at every ``/readyz``: cheap, and never raising (a raise is
answered as not ready, with the error)."""


def _always_ready() -> Readiness:
    return Readiness(True)


def health_app(registry: CollectorRegistry, ready: ReadinessCheck = _always_ready) -> Any:
    """The WSGI application of a stage's endpoint: ``/healthz`` 200 while the process
    answers; ``/readyz`` 200 or 503 from ``ready``, with a JSON body; ``/metrics`` (and any
    other path, as before) the registry in Prometheus' text format."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _json(start_response, 200, {"status": "ok"})
        if path == "/readyz":
            state = _readiness(ready)
            body = {"status": "ready" if state.ready else "not ready", **state.detail}
            return _json(start_response, 200 if state.ready else 503, body)
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    return app


def _readiness(ready: ReadinessCheck) -> Readiness:
    try:
        return ready()
    except Exception as exc:  # a probe gets an answer, the stage keeps running
        logger.exception("the readiness check failed")
        return Readiness(False, {"error": f"{type(exc).__name__}: {exc}"})


def _json(start_response: Callable[..., Any], status: int, body: object) -> list[bytes]:
    data = json.dumps(body, default=str).encode()
    reason = {200: "OK", 503: "Service Unavailable"}[status]
    start_response(
        f"{status} {reason}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]


class _Server(ThreadingMixIn, WSGIServer):
    """A thread a request, each joined on close (a probe takes at most its check's time)."""

    daemon_threads = False
    block_on_close = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes and scrapes every few seconds: not logged."""


@contextmanager
def serve_metrics(
    registry: CollectorRegistry, port: int, setting: str, ready: ReadinessCheck | None = None
) -> Iterator[None]:
    """Serve ``http://{host}:{port}``: ``/metrics`` (``registry``), ``/healthz`` and ``/readyz``
    (from ``ready``; none: ready while the process answers) while the block runs; ``port`` 0:
    not at all. The server's thread is stopped and joined on the way out. A port that cannot
    be bound stops the stage at start, naming ``setting``."""
    if port == 0:
        yield
        return
    app = health_app(registry, ready or _always_ready)
    try:
        server = make_server(
            METRICS_ADDRESS, port, app, server_class=_Server, handler_class=_QuietHandler
        )
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on port {port} ({exc.strerror or exc}); "
            f"set {setting} to a free port, or 0 for none"
        ) from exc
    thread = threading.Thread(target=server.serve_forever, name=f"metrics-{port}")
    thread.start()
    logger.info("metrics on port %d (/metrics, /healthz, /readyz)", port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
