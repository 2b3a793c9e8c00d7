"""A rule checked by Spark's own parser and analyser, in a child process.

The API loads no Spark (``make lint`` holds it to that): a long-lived child process does,
the ``fleetwatch-rule-check`` command the package installs beside ``fleetwatch``. It reads one
rule a line on its stdin (``RuleSpec.model_dump(mode="json")``) and answers each with one JSON
line on its stdout:
``{"ok": true}``, or ``{"ok": false, "field": "when" | "window" | "select", "error": "…"}`` with
the parser's or analyser's message. A line on its stdout that is not JSON (a library writing
there) is logged and passed over.

The child starts with the first rule to check, not with the API: its JVM takes hundreds of
megabytes and tens of seconds, which every API replica would pay at each start for a write
that operators make rarely; the first write waits for it instead (``start_timeout_s``). After
that it stays up, answering in milliseconds. One rule is in the child at a time. A child that
dies is started again by the next rule; one that does not answer in time, or answers outside
the protocol, is killed and started again. One that cannot start (it exits before its first
answer) is not tried again for ``retry_after_s``: meanwhile every check fails at once with the
reason. A check that cannot be made raises :class:`CheckerUnavailable` — a rule is never taken
unchecked.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from fleetwatch.contracts.rules import RuleSpec
from fleetwatch.serving.errors import ServingError

logger = logging.getLogger(__name__)

CHECK_COMMAND = "fleetwatch-rule-check"
"""The checker's console script (``pyproject.toml``'s ``[project.scripts]``)."""
START_TIMEOUT_S = 120.0
"""The first answer of a new child: its JVM starts (about 20 s on an idle machine)."""
TIMEOUT_S = 15.0
"""Any later answer (Spark analyses a rule in milliseconds once warm)."""
RETRY_AFTER_S = 10.0
"""After a child exited before its first answer, how long checks fail at once."""
_TAIL_BYTES = 4_096


def check_command() -> str:
    """The checker's script installed beside this interpreter (a virtual environment's
    ``bin/``), else the one on ``PATH``; a missing one fails the first check, naming it."""
    beside = Path(sys.executable).with_name(CHECK_COMMAND)
    if beside.exists():
        return str(beside)
    return shutil.which(CHECK_COMMAND) or CHECK_COMMAND


@dataclass(frozen=True)
class Verdict:
    """Spark's word on a rule: ``ok``, or the field it faults and its message."""

    ok: bool
    field: str | None = None
    """``when``, ``window`` or ``select``: the part of the rule that is wrong."""
    error: str | None = None


class CheckerUnavailable(ServingError):
    """The rule cannot be checked now: the checker cannot start, died, was too slow or answered
    outside its protocol. The message says which."""


class RuleCheck(Protocol):
    def check(self, spec: RuleSpec) -> Verdict:
        """Spark's verdict on ``spec``; :class:`CheckerUnavailable` when there is none."""

    def close(self) -> None: ...


class RuleChecker:
    """The client of one checker child process (started on the first :meth:`check`)."""

    def __init__(
        self,
        log_path: Path,
        argv: Sequence[str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        timeout_s: float = TIMEOUT_S,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self.log_path = log_path
        self.argv = list(argv) if argv is not None else [check_command()]
        self.start_timeout_s = start_timeout_s
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._answered = False
        """The current child has answered once (its JVM is up)."""
        self._buffer = b""
        self._refusing_until = 0.0
        self._refusal = ""

    def check(self, spec: RuleSpec) -> Verdict:
        line = (json.dumps(spec.model_dump(mode="json")) + "\n").encode()
        if not self._lock.acquire(timeout=self.start_timeout_s + self.timeout_s):
            raise CheckerUnavailable("the rule checker is busy with other rules; retry")
        try:
            proc = self._running()
            first = not self._answered
            stdin: IO[bytes] = proc.stdin  # type: ignore[assignment]
            try:
                stdin.write(line)
                stdin.flush()
            except OSError as exc:  # the child is gone (a broken pipe)
                raise self._lost(proc, first) from exc
            verdict = self._verdict(self._answer(proc, first))
            self._answered = True
            return verdict
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop the child: its stdin closed, it should exit; if not, SIGTERM, then SIGKILL."""
        self._stop(graceful=True)

    def _stop(self, graceful: bool) -> None:
        """Stop the child; one that is not ``graceful`` (stalled, out of protocol) is killed."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                logger.debug("the rule checker's stdin was closed already")
        stops = (None, proc.terminate, proc.kill) if graceful else (proc.kill,)
        for stop in stops:
            if stop is not None:
                stop()
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        if proc.stdout is not None:
            proc.stdout.close()

    def _running(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        if proc is not None:
            logger.warning(
                "the rule checker exited (code %s) between checks; starting another: %s",
                proc.returncode,
                self._tail(),
            )
            self.close()
        if time.monotonic() < self._refusing_until:
            raise CheckerUnavailable(self._refusal)
        self._buffer = b""
        self._answered = False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("wb") as log:
                self._proc = subprocess.Popen(
                    self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
                )
        except OSError as exc:
            raise self._refuse(f"the rule checker ({self._command()}) cannot start: {exc}") from exc
        logger.info("started the rule checker (pid %d): %s", self._proc.pid, self._command())
        return self._proc

    def _answer(self, proc: subprocess.Popen[bytes], first: bool) -> Any:
        """The child's next JSON line, within the timeout (the start's for a new child)."""
        timeout_s = self.start_timeout_s if first else self.timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._line(proc, deadline, timeout_s, first)
            try:
                return json.loads(line)
            except ValueError:
                logger.warning("the rule checker wrote a line that is not JSON: %.200r", line)

    def _line(
        self, proc: subprocess.Popen[bytes], deadline: float, timeout_s: float, first: bool
    ) -> bytes:
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self._stop(graceful=False)
                raise CheckerUnavailable(
                    f"the rule checker did not answer within {timeout_s:.0f} s "
                    f"({'starting' if first else 'running'}); it is restarted for the next rule"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65_536)
                if not chunk:  # end of file: the child exited
                    raise self._lost(proc, first)
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _verdict(self, answer: Any) -> Verdict:
        if isinstance(answer, dict) and answer.get("ok") is True:
            return Verdict(True)
        if (
            isinstance(answer, dict)
            and answer.get("ok") is False
            and all(isinstance(answer.get(k), str) and answer[k] for k in ("field", "error"))
        ):
            return Verdict(False, answer["field"], answer["error"])
        self._stop(graceful=False)
        raise CheckerUnavailable(
            f"the rule checker answered outside its protocol: {json.dumps(answer)[:200]}; "
            "it is restarted for the next rule"
        )

    def _lost(self, proc: subprocess.Popen[bytes], first: bool) -> CheckerUnavailable:
        try:
            code: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._stop(graceful=False)
        if first:
            return self._refuse(
                f"the rule checker ({self._command()}) exited (code {code}) before its first "
                f"answer: {self._tail()}"
            )
        return CheckerUnavailable(
            f"the rule checker exited (code {code}) while checking: {self._tail()}; "
            "it is restarted for the next rule"
        )

    def _refuse(self, message: str) -> CheckerUnavailable:
        """Fail checks at once for ``retry_after_s`` with ``message``."""
        self._refusal = f"{message} (tried again after {self.retry_after_s:.0f} s)"
        self._refusing_until = time.monotonic() + self.retry_after_s
        logger.error("%s", self._refusal)
        return CheckerUnavailable(self._refusal)

    def _command(self) -> str:
        return " ".join(Path(self.argv[0]).name if i == 0 else a for i, a in enumerate(self.argv))

    def _tail(self) -> str:
        """The last line the child wrote to its log (stderr), or where the log is."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - _TAIL_BYTES))
                lines = [ln.strip() for ln in log.read().decode(errors="replace").splitlines()]
        except OSError:
            lines = []
        last = next((ln for ln in reversed(lines) if ln), "")
        return f"{last[:300]} (log: {self.log_path})" if last else f"see {self.log_path}"
