"""A stage stopping on SIGTERM exits 0 even when a second SIGTERM comes while it stops (a
supervisor or a test fixture signalling again): the repeat lands, at worst, in the
interpreter's own shutdown, where Python's handlers are gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

STOPPING_SLOWLY = textwrap.dedent(
    """
    import time
    from fleetwatch.runtime import stop_event

    class TornDownSlowly:
        # a module global torn down in the interpreter's shutdown, after its signal handlers
        def __del__(self):
            time.sleep(2)

    held = TornDownSlowly()
    stop = stop_event()
    print("ready", flush=True)
    stop.wait()
    print("stopping", flush=True)
    """
)


def test_a_second_sigterm_while_stopping_does_not_kill_the_process() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPING_SLOWLY], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().strip() == "stopping"
    time.sleep(0.5)  # inside the slow tear-down
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
