"""A background loop over the API's store, with an explicit stop and join (no daemon
threads)."""

from __future__ import annotations

import logging
import threading
import time

from fleetwatch.serving.store import Store

logger = logging.getLogger(__name__)


class Worker:
    """Calls :meth:`step` until stopped; ``step`` returns how long to wait before the next.
    Each step reads or writes ``store``."""

    name = "worker"

    def __init__(self, store: Store) -> None:
        self.store = store
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        started = time.monotonic()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        logger.info("%s stopped in %.1fs", self.name, time.monotonic() - started)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def step(self) -> float:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the loop used (called on the worker's thread as it ends)."""

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    wait = self.step()
                except Exception:
                    logger.exception("%s: a step failed; retrying", self.name)
                    wait = 1.0
                if wait > 0:
                    self._stop.wait(wait)
        finally:
            self.close()
