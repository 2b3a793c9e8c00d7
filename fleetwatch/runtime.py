"""What every long-running process shares: SIGTERM and SIGINT turned into an event the stages
watch, and starting a stage's worker processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from types import FrameType


def stop_event() -> threading.Event:
    """An event set by the first SIGTERM or SIGINT (call from the main thread)."""
    stop = threading.Event()

    def _handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return stop


def fleetwatch_process(*args: str) -> subprocess.Popen[bytes]:
    """A ``fleetwatch`` subcommand in a new process on this interpreter (a stage supervising
    its own workers)."""
    return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli.main", *args])
