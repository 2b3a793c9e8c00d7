"""The compose file against the Compose specification (its JSON schema, as check-jsonschema
ships it) and against the code: the image every service runs, the settings it sets, the
variables it requires, its restarts and health checks, the files it mounts, the ports
Prometheus scrapes and Grafana's sources. The brokers' files: test_deploy_brokers.py; the
Kubernetes manifests: test_deploy_k8s.py; the image itself: test_deploy_image.py. None of it
builds or starts anything."""

from __future__ import annotations

import copy
import json
import re
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest
import yaml

from fleetwatch.cli.main import SUBCOMMANDS, load_subcommand
from tests.unit.deploy_support import (
    DEPLOY,
    IMAGE,
    REPO,
    STAGES,
    compose,
    compose_env,
    env_example,
    fleetwatch_services,
    image_env,
    interpolate,
    metrics_ports,
    settings_from,
)


def test_the_compose_file_follows_the_compose_specification() -> None:
    schema_file = files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema = json.loads(schema_file.read_text())
    assert schema["title"] == "Compose Specification"
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []
    # …and the check can fail: an unknown condition, an unknown key
    broken = copy.deepcopy(compose())
    broken["services"]["api"]["depends_on"]["kafka"]["condition"] = "service_ready"
    broken["services"]["gateway"]["healthchek"] = broken["services"]["gateway"].pop("healthcheck")
    found = list(validator.iter_errors(broken))
    said = " ".join(m for e in found for m in (e.message, *(c.message for c in e.context)))
    assert "'healthchek' was unexpected" in said
    assert "'service_ready' is not one of" in said


def test_every_fleetwatch_service_runs_the_one_image_built_from_the_repository() -> None:
    services = fleetwatch_services()
    assert set(STAGES) <= set(services)
    images = {name: interpolate(s["image"], {}) for name, s in services.items()}
    assert set(images.values()) == {IMAGE}, images
    for name, service in services.items():
        build = service["build"]
        assert (DEPLOY / build["context"]).resolve() == REPO, name
        assert build["dockerfile"] == "Dockerfile", name
    for name, command in STAGES.items():
        assert compose()["services"][name]["command"] == [command], name
        assert command in SUBCOMMANDS
        assert load_subcommand(command).name == command
    assert compose()["services"]["topics"]["command"] == ["topics", "create", "--acls"]
    assert "create" in load_subcommand("topics").commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("service", sorted(fleetwatch_services()))
def test_every_setting_compose_gives_a_fleetwatch_service_is_a_real_setting(
    service: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {k: v for k, v in image_env().items() if k.startswith("FLEETWATCH_")}
    settings = settings_from(env | compose_env(service), monkeypatch, tmp_path)
    assert settings.run_path == Path("/var/lib/fleetwatch")
    if service in STAGES or service == "topics":
        assert settings.kafka.bootstrap_servers == "kafka:9092"
    if service.startswith("api"):
        assert settings.database_url.startswith("postgresql+psycopg://fleetwatch:")
        assert settings.database_url.endswith("@postgres:5432/fleetwatch")
        assert settings.api.host == "0.0.0.0"  # in a container


def test_every_variable_compose_requires_is_in_the_example_env_file() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", (DEPLOY / "compose.yaml").read_text()))
    assert required == {
        "POSTGRES_PASSWORD",
        "GATEWAY_MQTT_PASSWORD",
        "GRAFANA_ADMIN_PASSWORD",
        "KAFKA_GATEWAY_PASSWORD",
        "KAFKA_SCORER_PASSWORD",
        "KAFKA_TRAINER_PASSWORD",
        "KAFKA_API_PASSWORD",
        "KAFKA_BROKER_PASSWORD",
    }
    assert required <= set(env_example())
    assert all(v.startswith("replace-with-") for k, v in env_example().items() if k in required)


def test_every_service_restarts_is_checked_and_waits_for_what_it_needs() -> None:
    services = compose()["services"]
    one_shot = {n for n, s in services.items() if s.get("restart") == "no"}
    assert one_shot == {"kafka-jmx-agent", "topics"}
    for name, service in services.items():
        if name in one_shot:
            assert "healthcheck" not in service, name
            continue
        assert service["restart"] == "unless-stopped", name
        assert service["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL"}, name
        for needed, condition in service.get("depends_on", {}).items():
            assert needed in services, (name, needed)
            if needed in one_shot:
                assert condition == {"condition": "service_completed_successfully"}, name
            else:
                assert condition == {"condition": "service_healthy"}, name
                assert "healthcheck" in services[needed], needed
    for stage in ("gateway", "scorer", "trainer", "api"):
        assert "topics" in services[stage]["depends_on"], stage
    assert "mlflow" in services["trainer"]["depends_on"]
    assert "kafka-jmx-agent" in services["kafka"]["depends_on"]


def test_every_file_compose_mounts_is_in_the_repository_or_kept_out_of_it() -> None:
    ignored = (REPO / ".gitignore").read_text().splitlines()
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if not source.startswith("."):
                assert source in compose()["volumes"], (name, source)
                continue
            path = (DEPLOY / source).resolve()
            if path.exists():
                continue
            # a secret the operator makes on the host: never committed, never made up by Docker
            kept_out = path.relative_to(REPO)
            kept = {Path(i) for i in ignored if i.strip() and not i.startswith(("#", "*"))}
            assert {kept_out, *kept_out.parents} & kept, (name, source)
            assert volume["bind"]["create_host_path"] is False, (name, source)


def _port(url_or_target: str) -> tuple[str, int]:
    host, _, port = re.sub(r"^https?://", "", url_or_target).split("/")[0].rpartition(":")
    return host, int(port)


def scrape_targets() -> list[tuple[str, str, int]]:
    """(job, host, port) of every target of deploy/prometheus/prometheus.yml."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    out: list[tuple[str, str, int]] = []
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            out.extend((job["job_name"], *_port(t)) for t in static["targets"])
        for dns in job.get("dns_sd_configs", []):
            out.extend((job["job_name"], name, dns["port"]) for name in dns["names"])
    return out


def test_prometheus_scrapes_services_that_exist_on_the_ports_they_serve_metrics_on() -> None:
    services = compose()["services"]
    ports = metrics_ports()
    scraped = set()
    for job, host, port in scrape_targets():
        if host == "localhost":
            assert job == "prometheus"
            continue
        assert host in services, f"job {job} scrapes {host}, which compose does not run"
        assert port == ports[host], (job, host)
        scraped.add(host)
    assert scraped == set(ports)  # every stage with metrics, and the broker
    # the health checks probe the same ports
    for service, port in ports.items():
        test = " ".join(services[service]["healthcheck"]["test"])
        if service != "kafka":
            assert f"127.0.0.1:{port}/" in test, service


def test_grafana_reads_prometheus_and_the_dashboards_directory() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    provisioning = DEPLOY / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    host, port = _port(source["url"])
    assert host in compose()["services"]
    assert f"{port}:{port}" in compose()["services"][host]["ports"][0]
    assert source["type"] == "prometheus"
    assert source["uid"] == "prometheus"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "fleetwatch.yaml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == mounts["./grafana/dashboards"]
    assert (DEPLOY / "grafana" / "dashboards").is_dir()


def test_exactly_one_api_process_delivers_webhooks_in_compose() -> None:
    delivering = []
    for name, service in compose()["services"].items():
        if service.get("command") != ["api"]:
            continue
        enabled = compose_env(name).get("FLEETWATCH_API__WEBHOOKS__ENABLED", "true")
        replicas = int(interpolate(str(service.get("deploy", {}).get("replicas", 1)), {}))
        if enabled == "true":
            delivering.append((name, replicas))
    assert delivering == [("api", 1)]
