"""The local Prometheus (Debian package) on loopback: ``fleetwatch stack up --with-prometheus``.

It scrapes what the settings say: itself, the local broker's JMX exporter (a static target,
the stack runs that broker) and the stages — gateway, scorer, trainer, API — through
``file_sd_configs``: one JSON file per job in ``{run_dir}/prometheus/targets/``, written from
the settings when Prometheus starts and re-read by Prometheus whenever it changes. A stage
that runs elsewhere, or a test that starts its stages on ports of its own, rewrites those
files (:meth:`PrometheusServer.write_targets`) and Prometheus scrapes the new addresses within
seconds, without a restart.

It evaluates the alerting rules of ``prometheus.rules_dir`` (``deploy/prometheus/rules/`` by
default, the ones compose and Kubernetes load) every scrape interval; the alerts are on its
``/alerts`` page and ``/api/v1/alerts``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.processes import StackService, port_in_use

STAGE_JOBS = ("gateway", "scorer", "trainer", "api")
"""Jobs whose targets come from files (``targets/{job}.json``); the broker's is static."""


def prometheus_binary() -> str | None:
    found = shutil.which("prometheus")
    if found:
        return found
    return "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None


def scrape_timeout_ms(interval_s: int) -> int:
    """Three quarters of the scrape interval: a target that has not answered by then is given
    up with a quarter of the interval to spare, so a slow scrape is one missed sample and the
    next scrape starts on time (a timeout equal to the interval leaves no room)."""
    return interval_s * 750


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def default_targets(settings: Settings) -> dict[str, list[str]]:
    """Each stage's metrics address from the settings (none for a port of 0: turned off)."""
    ports = {
        "gateway": settings.gateway.metrics_port,
        "scorer": settings.score.metrics_port,
        "trainer": settings.train.metrics_port,
    }
    targets = {job: [f"127.0.0.1:{port}"] if port else [] for job, port in ports.items()}
    targets["api"] = [f"{_loopback(settings.api.host)}:{settings.api.port}"]
    return targets


class PrometheusServer(StackService):
    name = "prometheus"
    config_name = "prometheus.yml"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def targets_dir(self) -> Path:
        return self.dir / "targets"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.prometheus.port}"

    @property
    def rules_dir(self) -> Path:
        chosen = self.settings.prometheus.rules_dir
        return (chosen or self.settings.home / "deploy" / "prometheus" / "rules").resolve()

    def targets_file(self, job: str) -> Path:
        return self.targets_dir / f"{job}.json"

    def render_config(self) -> str:
        p, k = self.settings.prometheus, self.settings.kafka
        interval = f"{p.scrape_interval_s}s"
        lines = [
            "# Written by `fleetwatch stack up --with-prometheus` from the settings at each start.",
            "# The stages' addresses are in targets/{job}.json (file_sd): rewrite those, not this.",
            "global:",
            f"  scrape_interval: {interval}",
            f"  scrape_timeout: {scrape_timeout_ms(p.scrape_interval_s)}ms",
            f"  evaluation_interval: {interval}",
            "rule_files:",
            f"  - {json.dumps(str(self.rules_dir / '*.yml'))}",
            "scrape_configs:",
            "  - job_name: prometheus",
            "    static_configs:",
            f'      - targets: ["127.0.0.1:{p.port}"]',
        ]
        if k.metrics_port:
            lines += [
                "  - job_name: kafka",
                "    static_configs:",
                f'      - targets: ["127.0.0.1:{k.metrics_port}"]',
            ]
        for job in STAGE_JOBS:
            lines += [
                f"  - job_name: {job}",
                "    file_sd_configs:",
                f"      - files: [{json.dumps(str(self.targets_file(job)))}]",
                "        refresh_interval: 30s",
            ]
        return "\n".join([*lines, ""])

    def write_targets(self, targets: Mapping[str, Sequence[str]]) -> None:
        """Point the jobs named in ``targets`` at these ``host:port`` addresses (an empty list:
        none). Each file is replaced atomically, so Prometheus never reads half of one."""
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        for job, addresses in targets.items():
            if job not in STAGE_JOBS:
                raise ValueError(f"no scrape job {job!r}; the jobs are {', '.join(STAGE_JOBS)}")
            groups = [{"targets": list(addresses), "labels": {}}] if addresses else []
            path = self.targets_file(job)
            partial = path.with_suffix(".json.partial")
            partial.write_text(json.dumps(groups, indent=2) + "\n")
            os.replace(partial, path)

    def command(self) -> list[str]:
        binary = prometheus_binary()
        if binary is None:
            raise self.proc.fail(
                "prometheus is not installed; run `make setup` (apt-get install prometheus)"
            )
        p = self.settings.prometheus
        return [
            binary,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={p.retention}",
            f"--web.listen-address=127.0.0.1:{p.port}",
        ]

    def start(self, targets: Mapping[str, Sequence[str]] | None = None) -> bool:
        """Start it with a config rendered from the settings and the stages' ``targets``
        (default: from the settings); False when it runs already (its targets are then left as
        they are)."""
        if self.proc.running():
            return False
        argv = self.command()
        port = self.settings.prometheus.port
        if port_in_use("127.0.0.1", port):
            raise self.proc.fail(
                f"port {port} is already in use by another process; "
                "stop it or set FLEETWATCH_PROMETHEUS__PORT"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_targets(default_targets(self.settings) | dict(targets or {}))
        self.config_file.write_text(self.render_config())
        self.proc.start(argv)
        return True

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        self.proc.wait_ready(self.ready, timeout_s, 0.2)
