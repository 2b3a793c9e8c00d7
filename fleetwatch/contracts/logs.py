"""One logging set-up for every fleetwatch process."""

from __future__ import annotations

import logging
import sys


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    for noisy in ("py4j", "httpx", "urllib3", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
