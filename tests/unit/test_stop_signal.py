"""A stage stopping on SIGTERM exits 0 even when a second SIGTERM comes while it stops (a
supervisor or a test fixture signalling again): the repeat lands, at worst, in the
interpreter's own shutdown, where Python's handlers are gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

STOPPING_SLOWLY = textwrap.dedent(
    """
    import os
    import time
    from fleetwatch.runtime import stop_event

    class TornDownSlowly:
        # a module global torn down in the interpreter's shutdown, after its signal handlers
        def __del__(self, write=os.write, sleep=time.sleep):
            write(1, b"tearing down\\n")
            sleep(2)

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
    assert proc.stdout.readline().strip() == "tearing down"  # inside the shutdown
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_child_started_after_a_sigterm_still_stops_on_one() -> None:
    """The handler ignores nothing itself: a process started while the stage stops (a worker
    restarted, a JVM launched) inherits SIGTERM's default, not an ignored signal."""
    script = textwrap.dedent(
        """
        import signal, subprocess, sys
        from fleetwatch.runtime import stop_event
        stop = stop_event()
        signal.raise_signal(signal.SIGTERM)
        assert stop.is_set()
        child = subprocess.Popen(  # blocks on its input until signalled
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
        )
        child.send_signal(signal.SIGTERM)
        print(child.wait(10))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(-signal.SIGTERM)
