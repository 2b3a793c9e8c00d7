"""SIGTERM and SIGINT turned into an event the long-running stages watch."""

from __future__ import annotations

import signal
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
