"""The JVMs the tests start: a Spark JVM lives a minute or two in a test, and on two cores its
start-up (class loading, the JIT) takes the CPU the stages need to start and run their first
batches.

- C1 alone (the same code, compiled less hard) starts them sooner: no C2 compiler threads.
- A class-data sharing archive (AppCDS, JDK 13+) of the classes a Spark session loads, made
  once per machine by :func:`class_archive` and mapped by every Spark JVM of the tests, spares
  each of them parsing and verifying thousands of classes from the jars: the same classes,
  loaded from a memory-mapped file. A JVM that finds the archive does not match its class path
  (``-Xshare:auto``, the default) runs without it.

The configured Java options are kept and these added."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from fleetwatch.contracts.settings import Settings

logger = logging.getLogger(__name__)

QUICK_JIT = "-XX:TieredStopAtLevel=1"


def quick_jit_options(settings: Settings) -> str:
    """``spark.java_options`` of ``settings`` with :data:`QUICK_JIT` and, when one could be
    made, the class archive of :func:`class_archive`."""
    options = f"{settings.spark.java_options} {QUICK_JIT}".strip()
    archive = class_archive(settings)
    return f"{options} -XX:SharedArchiveFile={archive}" if archive else options


def with_quick_jit(settings: Settings) -> Settings:
    """``settings`` whose Spark JVMs run with :func:`quick_jit_options`."""
    spark = settings.spark.model_copy(update={"java_options": quick_jit_options(settings)})
    return settings.model_copy(update={"spark": spark})


ARCHIVE_TIMEOUT_S = 300


def _archive_key(settings: Settings) -> str:
    """What the archive depends on: the JVM, pyspark's jars, the jars of ``make setup``, the
    Java options."""
    java = shutil.which("java")
    jars = settings.home / ".cache" / "jvm"
    parts = [
        str(Path(java).resolve()) if java else "",
        str(Path(java).resolve().stat().st_mtime_ns) if java else "",
        pyspark.__version__,
        settings.spark.java_options,
        QUICK_JIT,
        *sorted(str(p.relative_to(jars)) for p in jars.rglob("*.jar")),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


_ARCHIVES: dict[str, Path | None] = {}


def class_archive(settings: Settings) -> Path | None:
    """The class archive of a Spark session's JVM under ``.cache/jvm-cds/``, made on first use
    (a Spark session runs a small streaming plan in a child process whose JVM writes the
    classes it loaded when it exits: half a minute, once); None when it cannot be made."""
    key = _archive_key(settings)
    if key not in _ARCHIVES:
        _ARCHIVES[key] = _made_archive(settings, key)
    return _ARCHIVES[key]


def _made_archive(settings: Settings, key: str) -> Path | None:
    folder = settings.home / ".cache" / "jvm-cds"
    archive = folder / f"spark-{key}.jsa"
    if archive.exists():
        return archive
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be making it
        if archive.exists():
            return archive
        for old in folder.glob("spark-*.jsa"):
            old.unlink()  # made for other jars or options
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            made = Path(scratch) / archive.name
            options = f"{settings.spark.java_options} {QUICK_JIT} -XX:ArchiveClassesAtExit={made}"
            env = dict(os.environ, FLEETWATCH_SPARK__JAVA_OPTIONS=options.strip())
            try:
                run = subprocess.run(
                    [sys.executable, "-m", "tests.jvm_warmup", scratch],
                    env=env,
                    cwd=settings.home,
                    capture_output=True,
                    text=True,
                    timeout=ARCHIVE_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                logger.warning("no class archive: its Spark run took over %d s", ARCHIVE_TIMEOUT_S)
                return None
            if run.returncode != 0 or not made.exists():
                logger.warning("no class archive (exit %d): %s", run.returncode, run.stderr[-2000:])
                return None
            with contextlib.suppress(FileNotFoundError):
                made.replace(archive)
    return archive if archive.exists() else None


if __name__ == "__main__":
    # ``python -m tests.jvm``: the archive made ahead of the tests that map it (``make test``
    # runs this beside the unit tests)
    class_archive(Settings())
