"""Local stack: cold `up` (format + start + topics) against warm `up` (existing data), `down`,
and the resident memory of each broker at rest. Runs a second stack on free ports in a
temporary run dir, so a running stack is left alone.

    python bench/micro/stack.py

Last line: {"cold_up_s", "warm_up_s", "down_s", "kafka_rss_mb", "mosquitto_rss_mb", "rest_s"}
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import private_stack_settings, rss_mb, write_results
from fleetwatch.stack.manager import Stack

REST_S = 20.0


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below
    with tempfile.TemporaryDirectory(prefix="fleetwatch-bench-") as run_dir:
        settings = private_stack_settings(Path(run_dir))
        stack = Stack(settings)
        try:
            cold = stack.up()
            started = time.monotonic()
            stack.down()
            down = time.monotonic() - started
            warm = stack.up()
            time.sleep(REST_S)  # the measurement is "at rest": nothing to wait for but time
            pids = {c.name: c.pid for c in stack.status()}
            memory = {name: rss_mb(pid) for name, pid in pids.items() if pid}
        finally:
            stack.down()
    print(f"cold up {cold:.1f}s, warm up {warm:.1f}s, down {down:.1f}s")
    kafka, mosquitto = memory["kafka"], memory["mosquitto"]
    print(f"at rest after {REST_S:.0f}s: kafka {kafka:.0f} MB, mosquitto {mosquitto:.1f} MB")
    figures = {
        "cold_up_s": round(cold, 2),
        "warm_up_s": round(warm, 2),
        "down_s": round(down, 2),
        "kafka_rss_mb": round(memory["kafka"], 1),
        "mosquitto_rss_mb": round(memory["mosquitto"], 1),
        "rest_s": REST_S,
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
