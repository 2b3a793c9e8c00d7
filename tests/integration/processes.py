"""Processes a test kills and watches: a stage's process tree (a Spark stage's driver starts a
JVM, which starts Python workers), whether a pid still runs, a checkpoint's micro-batches."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from tests.polling import wait_until


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, and so on."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (reaping it when it is our child)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    return not alive(pid)


def kill_tree(pid: int, timeout_s: float = 60) -> None:
    """SIGKILL ``pid`` and every process under it, all at once (no flush, no goodbye), and wait
    until each has exited."""
    tree = [pid, *descendants(pid)]
    for each in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    wait_until(lambda: all(gone(p) for p in tree), timeout_s, f"the processes of {pid} to exit")


def batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("[0-9]*"))
