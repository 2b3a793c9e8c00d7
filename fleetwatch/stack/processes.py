"""Background processes owned by fleetwatch: started detached, tracked by pid file, stopped by
pid only when the pid still runs the command we started."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.errors import StackError

logger = logging.getLogger(__name__)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = 20) -> list[str]:
    if not path.exists():
        return []
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 64 * 1024))
        return fh.read().decode(errors="replace").splitlines()[-lines:]


@dataclass(frozen=True)
class ManagedProcess:
    """One named background process: its pid file and log live under ``run_dir``."""

    name: str
    run_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "pids" / f"{self.name}.json"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "logs" / f"{self.name}.log"

    def _record(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def pid(self) -> int | None:
        """The pid if our process still runs (same pid and the same command line), else None."""
        record = self._record()
        if record is None:
            return None
        pid = record.get("pid")
        if not isinstance(pid, int):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if [c.decode(errors="replace") for c in cmdline if c] != record.get("argv"):
            return None  # the pid was reused by something else: not ours to touch
        return pid

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        self.pid_file.write_text(json.dumps({"pid": proc.pid, "argv": list(argv)}))
        # /proc/<pid>/cmdline reads empty for a moment while exec completes; identity checks
        # (pid()) compare it, so return once it shows the command.
        wait_for(lambda: self.pid() is not None or not _alive(proc.pid), 5.0, 0.005)
        logger.info("started %s (pid %d), log %s", self.name, proc.pid, self.log_file)
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, wait, SIGKILL after ``timeout_s``. Returns whether something was stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: not _alive(pid), timeout_s):
            logger.warning(
                "%s (pid %d) ignored SIGTERM for %.0fs; killing", self.name, pid, timeout_s
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            wait_for(lambda: not _alive(pid), 10.0)
        self.pid_file.unlink(missing_ok=True)
        return True

    def wait_ready(self, probe: Callable[[], bool], timeout_s: float, interval_s: float) -> None:
        """Wait until ``probe`` answers; a process that dies or never answers is a one-line
        error with its last log line and the log's path."""

        def up_or_dead() -> bool:
            return not self.running() or probe()

        if not wait_for(up_or_dead, timeout_s, interval_s) or not self.running():
            last = next((ln for ln in reversed(tail(self.log_file)) if ln.strip()), "")
            raise self.fail(f"did not become ready: {last or 'no output'}")

    def fail(self, reason: str) -> StackError:
        return StackError(f"{self.name}: {reason} (log: {self.log_file})")


class StackService:
    """A process of the local stack: its :class:`ManagedProcess` named ``name``, and its own
    folder ``{run_path}/{name}``, where its configuration file ``config_name`` is written."""

    name: ClassVar[str]
    config_name: ClassVar[str]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.proc = ManagedProcess(self.name, settings.run_path)
        self.dir = settings.run_path / self.name

    @property
    def config_file(self) -> Path:
        return self.dir / self.config_name


def _alive(pid: int) -> bool:
    try:
        with contextlib.suppress(ChildProcessError):
            reaped, _ = os.waitpid(pid, os.WNOHANG)
            if reaped == pid:
                return False
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
