"""A Spark standalone cluster and an S3-compatible store, each started here for one test.

The cluster is a master and two workers started from the installed pyspark distribution's own
classes (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), on
loopback. The store is moto's S3 server (``moto[s3]``, a dev dependency that ``make setup``
installs, served by gunicorn): it speaks S3's REST API (signed requests, path-style buckets,
multipart uploads, ETags, conditional requests) in a local process, standing in for AWS S3,
MinIO, Ceph's RGW and the other S3-compatible stores Hadoop's S3A connector talks to.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import boto3
import httpx
import pyspark
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError

from tests.integration.conftest import free_port
from tests.jvm import QUICK_JIT
from tests.polling import wait_until

SPARK_HOME = Path(pyspark.__file__).parent
"""The installed pyspark: its ``bin/`` scripts and ``jars/`` are a Spark distribution."""
BIN = SPARK_HOME / "bin"


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """SIGTERM ``proc``'s process group, then SIGKILL what is left of it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout_s)


def started(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``args`` in a process group of its own (so that it and its children stop together)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


@dataclass(frozen=True)
class S3Store:
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    server: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)
    log: Path | None = None

    def ready(self, timeout_s: float = 60) -> None:
        """Wait for the server to answer, and make the bucket."""

        def bucket_made() -> bool:
            assert self.server is None or self.server.poll() is None, (
                f"the S3 server exited; see {self.log}"
            )
            try:
                self._client.create_bucket(Bucket=self.bucket)
            except EndpointConnectionError:
                return False
            return True

        wait_until(bucket_made, timeout_s, "the S3 server to take a bucket", 0.1)

    def uri(self, key: str) -> str:
        return f"s3a://{self.bucket}/{key}"

    @cached_property
    def _client(self) -> Any:
        """One client (making one costs more than the requests the test's polls make)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            # a server not up yet is polled again by ready(), not retried with back-off here
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def _key(self, uri: str) -> str:
        prefix = f"s3a://{self.bucket}/"
        assert uri.startswith(prefix), uri
        return uri[len(prefix) :].rstrip("/")

    def _list(self, prefix: str, delimiter: str = "") -> tuple[list[str], list[str]]:
        reply = self._client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, Delimiter=delimiter)
        keys = [o["Key"] for o in reply.get("Contents", [])]
        folders = [p["Prefix"] for p in reply.get("CommonPrefixes", [])]
        return keys, folders

    # CheckpointFiles (fleetwatch.streaming.checkpoint_files), over S3's API
    def exists(self, path: str) -> bool:
        key = self._key(path)
        keys, _ = self._list(key)
        return any(k == key or k.startswith(key + "/") for k in keys)

    def names(self, folder: str) -> list[str]:
        prefix = self._key(folder) + "/"
        keys, folders = self._list(prefix, "/")
        return sorted({p[len(prefix) :].strip("/") for p in keys + folders} - {""})

    def read_text(self, path: str) -> str:
        reply = self._client.get_object(Bucket=self.bucket, Key=self._key(path))
        return str(reply["Body"].read().decode())

    def delete(self, path: str) -> None:
        raise NotImplementedError("the test only reads the checkpoint")


@contextlib.contextmanager
def s3_store(logs: Path, bucket: str, access_key: str, secret_key: str) -> Iterator[S3Store]:
    """moto's S3 server (:mod:`tests.integration.s3_server`, one process: its buckets are in
    memory) on a free loopback port, started: :meth:`S3Store.ready` waits for it and makes
    ``bucket`` (so that other processes can start meanwhile)."""
    port = free_port()
    log = logs / "s3.log"
    proc = started(
        [str(Path(sys.executable).parent / "gunicorn"), "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "8", "--access-logfile", "-",
         "--no-control-socket", "tests.integration.s3_server:app"],
        log,
    )  # fmt: skip
    try:
        yield S3Store(f"http://127.0.0.1:{port}", bucket, access_key, secret_key, proc, log)
    finally:
        stop(proc)


@dataclass(frozen=True)
class Cluster:
    master: str
    """``spark://host:port``"""
    status_url: str

    def status(self) -> Any:
        """The master's state as its web UI serves it (``/json/``)."""
        reply = httpx.get(self.status_url, timeout=5)
        reply.raise_for_status()
        return reply.json()

    def alive_workers(self) -> int:
        return sum(1 for w in self.status()["workers"] if w["state"] == "ALIVE")

    def active_apps(self, name: str | None = None) -> int:
        """Applications running (named ``name``, when given)."""
        return sum(1 for a in self.status()["activeapps"] if name in (None, a["name"]))


@contextlib.contextmanager
def standalone_cluster(
    logs: Path, workers: int = 2, cores: int = 2, memory: str = "2g"
) -> Iterator[Cluster]:
    """A master and ``workers`` workers, each with ``cores`` and ``memory`` for executors, on
    loopback; the workers start once the master leads."""
    port, ui = free_port(), free_port()
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JIT,
            "SPARK_NO_DAEMONIZE": "1",
        }
    )
    url = f"spark://127.0.0.1:{port}"
    daemons = {
        "master": started(
            [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
            logs / "spark-master.log",
            env,
        )
    }  # fmt: skip
    cluster = Cluster(url, f"http://127.0.0.1:{ui}/json/")

    def up(count: int) -> bool:
        for name, proc in daemons.items():
            assert proc.poll() is None, f"the {name} exited; see {logs}/spark-{name}.log"
        try:
            status = cluster.status()
        except (httpx.HTTPError, json.JSONDecodeError):
            return False
        alive = sum(1 for w in status["workers"] if w["state"] == "ALIVE")
        return bool(status["status"] == "ALIVE" and alive == count)

    try:
        # the workers once the master leads: a worker that registers before is answered
        # "standby" and tries again only after a randomised 5-15 s
        wait_until(lambda: up(0), 60, "the master to lead", 0.2)
        for n in range(1, workers + 1):
            daemons[f"worker-{n}"] = started(
                [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                 "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", str(cores),
                 "--memory", memory, "--work-dir", str(logs / f"spark-work-{n}"), url],
                logs / f"spark-worker-{n}.log",
                env,
            )  # fmt: skip
        wait_until(lambda: up(workers), 90, f"{workers} workers to register with the master", 0.2)
        yield cluster
    finally:
        for proc in daemons.values():  # all at once, then each waited for
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in daemons.values():
            stop(proc)
