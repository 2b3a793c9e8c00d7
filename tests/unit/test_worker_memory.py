"""A worker's freed memory goes back to the system at its task's end."""

from __future__ import annotations

import subprocess
import sys
import textwrap

FREED_THEN_RELEASED = textwrap.dedent(
    """
    from fleetwatch.streaming.worker_memory import release_freed

    def rss_mb():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024

    held = [bytes(1024) for _ in range(200_000)]  # 200 MB from malloc, not Python's arenas
    last = bytes(1024)  # keeps the heap's top in use: freeing the rest leaves a hole
    del held
    freed = rss_mb()
    release_freed()
    print(freed, rss_mb())
    """
)


def test_freed_pages_in_the_middle_of_the_heap_go_back() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FREED_THEN_RELEASED], capture_output=True, text=True, check=True
    ).stdout
    freed, released = map(int, out.split())
    assert freed - released >= 100, (freed, released)
