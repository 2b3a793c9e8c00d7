"""What several benchmarks share: a private stack's settings, free ports, resident memory."""

from __future__ import annotations

import socket
from pathlib import Path

from fleetwatch.contracts.settings import KafkaSettings, MqttSettings, Settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def private_stack_settings(run_dir: Path) -> Settings:
    """A stack of its own (free ports, its own run dir), so a running stack is left alone."""
    port = free_port()
    return Settings(
        run_dir=run_dir,
        kafka=KafkaSettings(
            port=port, controller_port=free_port(), bootstrap_servers=f"127.0.0.1:{port}"
        ),
        mqtt=MqttSettings(port=free_port()),
    )
