"""The deployment files against their specifications and against the code: the compose file
(the Compose specification's JSON schema, as check-jsonschema ships it), the Kubernetes
manifests (Kubernetes 1.33's API schemas, kubernetes-validate), the spark-submit command of
deploy/k8s/README.md, and the facts they share with the code and with each other that could
drift apart: the image, the settings they set, the ports Prometheus scrapes, the broker
configuration the local stack also writes. The image itself: test_deploy_image.py. None of it
builds or starts anything."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from fleetwatch.cli.main import app as cli
from fleetwatch.contracts.settings import Settings, SparkSettings
from fleetwatch.kafka_config import client_config, spark_options
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.mosquitto import MosquittoBroker
from tests.unit.deploy_support import (
    DEPLOY,
    IMAGE,
    K8S,
    KAFKA_IMAGE_EXCLUDES,
    KAFKA_START,
    REPO,
    STAGES,
    compose,
    compose_env,
    container_env,
    deployed_kafka,
    env_example,
    fleetwatch_containers,
    fleetwatch_services,
    image_env,
    interpolate,
    k8s_config,
    k8s_documents,
    k8s_files,
    k8s_workload,
    kafka_image_properties,
    kafka_property_name,
    pod_specs,
    settings_from,
)

KUBERNETES_VERSION = "1.33.0"
"""The API the manifests are checked against (kubernetes-validate ships 1.25 to 1.37)."""


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
    subcommands = {c.name or c.callback.__name__ for c in cli.registered_commands if c.callback}
    groups = {g.name for g in cli.registered_groups}
    for name, command in STAGES.items():
        assert compose()["services"][name]["command"] == [command], name
        assert command in subcommands | groups
    assert compose()["services"]["topics"]["command"] == ["topics", "create"]
    assert "topics" in groups


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
        "KAFKA_SASL_PASSWORD",
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


def metrics_ports() -> dict[str, int]:
    """Where each scraped compose service serves its metrics, from its own configuration."""
    kafka_opts = compose()["services"]["kafka"]["environment"]["KAFKA_OPTS"]
    agent = re.search(r"jmx_prometheus_javaagent\.jar=(\d+):", kafka_opts)
    assert agent
    return {
        "api": int(compose_env("api")["FLEETWATCH_API__PORT"]),
        "api-replicas": int(compose_env("api-replicas")["FLEETWATCH_API__PORT"]),
        "gateway": int(compose_env("gateway")["FLEETWATCH_GATEWAY__METRICS_PORT"]),
        "scorer": int(compose_env("scorer")["FLEETWATCH_SCORE__METRICS_PORT"]),
        "trainer": int(compose_env("trainer")["FLEETWATCH_TRAIN__METRICS_PORT"]),
        "kafka": int(agent.group(1)),
    }


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


def _mosquitto_settings(text: str) -> dict[str, str]:
    keep = (
        "persistence ",
        "autosave_interval",
        "max_queued_messages",
        "max_queued_bytes",
        "max_inflight_messages",
        "persistent_client_expiration",
    )
    lines = [line for line in text.splitlines() if line.startswith(keep)]
    return dict(line.split(" ", 1) for line in lines)


def test_the_deployed_mosquitto_queues_and_keeps_sessions_as_the_local_stack_s(
    tmp_path: Path,
) -> None:
    deployed = (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
    local = MosquittoBroker(Settings(run_dir=tmp_path)).render_config()
    assert _mosquitto_settings(deployed) == _mosquitto_settings(local)
    assert len(_mosquitto_settings(deployed)) == 6
    assert "allow_anonymous false" in deployed
    # the files the configuration names are where compose mounts them
    mounts = {
        (v["target"] if isinstance(v, dict) else v.split(":")[1])
        for v in compose()["services"]["mosquitto"]["volumes"]
    }
    for setting in ("password_file", "acl_file"):
        for path in re.findall(rf"^{setting} (\S+)$", deployed, re.MULTILINE):
            assert path in mounts, path
    for setting in ("certfile", "keyfile"):
        for path in re.findall(rf"^{setting} (\S+)$", deployed, re.MULTILINE):
            assert any(Path(path).is_relative_to(m) for m in mounts), path


def mosquitto_listeners(text: str) -> dict[int, dict[str, str]]:
    """Each listener of a Mosquitto configuration (``per_listener_settings``): its port → its
    bind address (``bind``, "" for every interface) and the settings between it and the next."""
    own = ("certfile", "keyfile", "cafile", "allow_anonymous", "password_file", "acl_file")
    out: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "listener":
            port, *bind = value.split()
            current = out.setdefault(int(port), {"bind": bind[0] if bind else ""})
        elif current is not None and key in own:
            current[key] = value
    return out


def mounted_secret_files(
    pod: dict[str, Any], container: dict[str, Any]
) -> dict[str, tuple[str, str]]:
    """A container's files from Secrets: path → (Secret, key), for volumes that list items."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        for item in (secret or {}).get("items", []):
            path = f"{mount['mountPath']}/{item['path']}"
            out[path] = (secret["secretName"], item["key"])
    return out


def test_devices_and_the_gateway_reach_mosquitto_over_tls_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    listeners = mosquitto_listeners((DEPLOY / "mosquitto" / "mosquitto.conf").read_text())
    reachable = {port: opts for port, opts in listeners.items() if opts["bind"] != "127.0.0.1"}
    assert list(reachable) == [8883]  # besides it, only the loopback health-check listener
    tls = reachable[8883]
    assert tls["certfile"] == "/mosquitto/certs/tls.crt"
    assert tls["keyfile"] == "/mosquitto/certs/tls.key"
    assert tls["allow_anonymous"] == "false"

    # compose: only the TLS port is published; the gateway connects to it over TLS, verifying
    # the broker with the CA of the folder the broker's certificate comes from
    mosquitto = compose()["services"]["mosquitto"]
    assert mosquitto["ports"] == ["8883:8883"]
    broker_mounts = {v["target"]: v["source"] for v in mosquitto["volumes"] if isinstance(v, dict)}
    assert broker_mounts["/mosquitto/certs"] == "./mosquitto/certs"
    env = {k: v for k, v in image_env().items() if k.startswith("FLEETWATCH_")}
    gateway = settings_from(env | compose_env("gateway"), monkeypatch, tmp_path).mqtt
    assert (gateway.host, gateway.port, gateway.tls) == ("mosquitto", 8883, True)
    gateway_volumes = compose()["services"]["gateway"]["volumes"]
    gateway_mounts = {v["target"]: v["source"] for v in gateway_volumes if isinstance(v, dict)}
    assert gateway_mounts[str(gateway.ca_file)] == "./mosquitto/certs/ca.crt"

    # Kubernetes: the Service's port is the TLS listener's; the broker's certificate and key
    # and the gateway's CA come from the one Secret
    service = k8s_workload("Service", "mosquitto")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8883, "mqtts")]
    broker_pod = k8s_workload("Deployment", "mosquitto")["spec"]["template"]["spec"]
    (broker,) = broker_pod["containers"]
    assert {p["name"]: p["containerPort"] for p in broker["ports"]} == {"mqtts": 8883}
    files = mounted_secret_files(broker_pod, broker)
    assert files[tls["certfile"]] == ("mosquitto-tls", "tls.crt")
    assert files[tls["keyfile"]] == ("mosquitto-tls", "tls.key")
    secret = k8s_workload("Secret", "mosquitto-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["stringData"]) == {"tls.crt", "tls.key", "ca.crt"}
    gateway_pod = k8s_workload("StatefulSet", "gateway")["spec"]["template"]["spec"]
    (container,) = gateway_pod["containers"]
    k8s = settings_from(container_env(container, k8s_config()), monkeypatch, tmp_path).mqtt
    assert (k8s.host, k8s.port, k8s.tls) == (service["metadata"]["name"], 8883, True)
    ca = mounted_secret_files(gateway_pod, container)[str(k8s.ca_file)]
    assert ca == ("mosquitto-tls", "ca.crt")


COMPOSE_KAFKA_LOGIN = {"KAFKA_SASL_PASSWORD": "client-pw.1", "KAFKA_BROKER_PASSWORD": "broker-pw_2"}
"""deploy/.env's Kafka passwords, as a test gives them (.env.example's are placeholders)."""

K8S_SECRETS = {
    "kafka-sasl-password": "client-pw.1",
    "kafka-broker-password": "broker-pw_2",
}
"""fleetwatch-secrets' Kafka passwords, as a test gives them."""

KAFKA_SECURITY = (
    "FLEETWATCH_KAFKA__SECURITY_PROTOCOL",
    "FLEETWATCH_KAFKA__SASL_MECHANISM",
    "FLEETWATCH_KAFKA__SASL_USERNAME",
    "FLEETWATCH_KAFKA__SASL_PASSWORD",
)


def kafka_clients_in_compose() -> list[str]:
    """The compose services that are Kafka clients: every one with a Kafka setting."""
    return sorted(
        name
        for name, service in fleetwatch_services().items()
        if any(k.startswith("FLEETWATCH_KAFKA__") for k in service.get("environment", {}))
    )


def test_every_fleetwatch_service_logs_in_to_the_compose_kafka_and_to_a_cluster_of_your_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert set(kafka_clients_in_compose()) == {*STAGES, "topics", "api-replicas"}
    image = {k: v for k, v in image_env().items() if k.startswith("FLEETWATCH_")}
    broker = compose_env("kafka", COMPOSE_KAFKA_LOGIN)
    for service in kafka_clients_in_compose():
        raw = compose()["services"][service]["environment"]
        assert set(KAFKA_SECURITY) <= set(raw), service
        shipped = settings_from(
            image | compose_env(service, COMPOSE_KAFKA_LOGIN), monkeypatch, tmp_path
        ).kafka
        assert (shipped.security_protocol, shipped.sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
        config = client_config(shipped)
        assert config["sasl.username"] == broker["CLIENT_SASL_USERNAME"] == "fleetwatch"
        assert config["sasl.password"] == broker["CLIENT_SASL_PASSWORD"] == "client-pw.1"
        jaas = spark_options(shipped)["kafka.sasl.jaas.config"]
        assert 'username="fleetwatch" password="client-pw.1"' in jaas, service

    own_cluster = {
        "KAFKA_BOOTSTRAP_SERVERS": "kafka-1.example.com:9096",
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "KAFKA_SASL_USERNAME": "fleetwatch",
        "KAFKA_SASL_PASSWORD": "s3cret",
    }
    example = (DEPLOY / ".env.example").read_text()
    for name in own_cluster:
        assert re.search(rf"^#? ?{name}=", example, re.MULTILINE), name
    for service in kafka_clients_in_compose():
        own = settings_from(image | compose_env(service, own_cluster), monkeypatch, tmp_path)
        config = client_config(own.kafka)
        assert config["bootstrap.servers"] == "kafka-1.example.com:9096", service
        assert config["security.protocol"] == "SASL_SSL", service
        assert config["sasl.mechanisms"] == "SCRAM-SHA-256", service
        assert (config["sasl.username"], config["sasl.password"]) == ("fleetwatch", "s3cret")


def kafka_clients_in_kubernetes() -> dict[str, dict[str, Any]]:
    """The containers that are Kafka clients: every one that reads fleetwatch-config."""
    return {name: c for name, c in fleetwatch_containers() if c.get("envFrom")}


def test_every_fleetwatch_container_logs_in_to_kafka_with_the_secret_s_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clients = kafka_clients_in_kubernetes()
    assert set(clients) == {
        "StatefulSet/gateway",
        "Deployment/api-webhooks",
        "Deployment/api",
        "Job/topics",
        "Pod/Pod",  # the Spark driver's template (its executors get the login from the driver)
    }
    broker = {e["name"]: e for e in k8s_kafka_container()["env"]}
    client_password = broker["CLIENT_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    client_username = broker["CLIENT_SASL_USERNAME"]["valueFrom"]["configMapKeyRef"]
    assert client_username == {"name": "fleetwatch-config", "key": KAFKA_SECURITY[2]}
    for name, container in clients.items():
        env = container_env(container, k8s_config())
        assert set(KAFKA_SECURITY) <= set(env), name
        (password,) = [e for e in container["env"] if e["name"] == KAFKA_SECURITY[3]]
        assert password["valueFrom"]["secretKeyRef"] == client_password, name
        kafka = settings_from(env, monkeypatch, tmp_path).kafka
        assert (kafka.security_protocol, kafka.sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
        assert kafka.sasl_username == k8s_config()[client_username["key"]], name


def test_no_secret_is_written_into_compose_or_the_manifests() -> None:
    secretive = re.compile(r"PASSWORD|SECRET|DATABASE_URL|STORE_URI")
    for name, service in compose()["services"].items():
        for variable, value in service.get("environment", {}).items():
            if secretive.search(variable):
                assert re.search(r"\$\{\w+:\?", str(value)), (name, variable)
    for doc in k8s_documents():
        if doc["kind"] == "ConfigMap":
            assert not [k for k in doc["data"] if secretive.search(k)], doc["metadata"]["name"]
        for _, containers in pod_specs(doc):
            for container in containers:
                for variable in container.get("env", []):
                    if not secretive.search(variable["name"]):
                        continue
                    if "value" in variable:  # made of secrets, e.g. a database URL
                        assert re.search(r"\$\(\w*PASSWORD\)", variable["value"]), variable
                    else:
                        assert variable["valueFrom"]["secretKeyRef"]["name"] == (
                            "fleetwatch-secrets"
                        ), variable


def k8s_kafka_container() -> dict[str, Any]:
    (container,) = k8s_workload("StatefulSet", "kafka")["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def k8s_kafka_env(secrets: dict[str, str]) -> dict[str, str]:
    """The broker container's environment as Kubernetes makes it, with ``secrets``' values."""
    env: dict[str, str] = {}
    config_maps = {
        d["metadata"]["name"]: d["data"] for d in k8s_documents() if d["kind"] == "ConfigMap"
    }
    for variable in k8s_kafka_container()["env"]:
        if "value" in variable:
            env[variable["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env[m.group(1)], variable["value"]
            )
            continue
        source = variable["valueFrom"]
        if "secretKeyRef" in source:
            assert source["secretKeyRef"]["name"] == "fleetwatch-secrets"
            env[variable["name"]] = secrets[source["secretKeyRef"]["key"]]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            env[variable["name"]] = config_maps[ref["name"]][ref["key"]]
        else:
            assert source["fieldRef"]["fieldPath"] == "metadata.name"
            env[variable["name"]] = "kafka-0"
    return env


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,…`` → name → (host, port)."""
    out = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def check_the_broker_requires_a_login(
    env: dict[str, str], probe: str, client_username: str, client_password: str, workdir: Path
) -> None:
    """The broker a container with ``env`` runs accepts clients only with a SASL login, the
    fleetwatch processes' account among its accounts, and ``probe`` (its health check's
    command) logs in as the broker's own account."""
    kept_out = [
        name
        for name, value in env.items()
        if name.startswith("KAFKA") and name not in KAFKA_IMAGE_EXCLUDES and "=" in value
    ]
    assert kept_out == []  # the image would leave them out of the broker's properties
    assert not [n for n in env if n.startswith("FLEETWATCH_")]  # and it is not a fleetwatch one
    broker = deployed_kafka(env, workdir)
    props = broker.server
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    bound = listeners(props["listeners"])
    (controller,) = props["controller.listener.names"].split(",")
    assert protocols.pop(controller) == "PLAINTEXT"
    assert bound.pop(controller)[0] == "127.0.0.1"  # only this process reaches it
    assert props["controller.quorum.voters"].split("@")[1] == "127.0.0.1:{}".format(
        listeners(props["listeners"])[controller][1]
    )
    assert set(protocols) == set(bound) == set(listeners(props["advertised.listeners"]))
    assert set(protocols.values()) == {"SASL_PLAINTEXT"}
    assert props["inter.broker.listener.name"] in protocols
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert props["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    broker_password = env["BROKER_SASL_PASSWORD"]
    for listener in protocols:
        jaas = props[f"listener.name.{listener.lower()}.plain.sasl.jaas.config"]
        assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")
        assert f'username="broker" password="{broker_password}"' in jaas
        assert f'user_broker="{broker_password}"' in jaas
        assert f'user_{client_username}="{client_password}"' in jaas
        assert jaas.endswith(";")
    assert broker.probe["security.protocol"] == "SASL_PLAINTEXT"
    assert broker.probe["sasl.mechanism"] == "PLAIN"
    assert f'username="broker" password="{broker_password}";' in broker.probe["sasl.jaas.config"]
    # the probe reads the file where start.sh writes it in the container
    written_to = re.search(r"SASL_CONFIG_DIR:-(\S+)\}", KAFKA_START.read_text())
    assert written_to
    command = shlex.split(probe)
    login = command[command.index("--command-config") + 1]
    assert login == f"{written_to.group(1)}/probe.properties"
    assert "kafka-broker-api-versions.sh" in probe


def test_the_compose_kafka_accepts_only_a_sasl_login(tmp_path: Path) -> None:
    kafka = compose()["services"]["kafka"]
    assert kafka["command"] == ["bash", "/etc/kafka/sasl/start.sh", "/etc/kafka/docker/run"]
    assert "./kafka/start.sh:/etc/kafka/sasl/start.sh:ro" in kafka["volumes"]
    env = compose_env("kafka", COMPOSE_KAFKA_LOGIN)
    client = compose_env("gateway", COMPOSE_KAFKA_LOGIN)
    check_the_broker_requires_a_login(
        env,
        kafka["healthcheck"]["test"][1],
        client["FLEETWATCH_KAFKA__SASL_USERNAME"],
        client["FLEETWATCH_KAFKA__SASL_PASSWORD"],
        tmp_path,
    )


def test_the_kubernetes_kafka_accepts_only_a_sasl_login(tmp_path: Path) -> None:
    container = k8s_kafka_container()
    assert container["command"] == ["bash", "/etc/kafka/sasl/start.sh", "/etc/kafka/docker/run"]
    pod = k8s_workload("StatefulSet", "kafka")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    start = volumes[mounts["/etc/kafka/sasl"]]["configMap"]
    assert start["name"] == "kafka-config"
    assert start["items"] == [{"key": "start.sh", "path": "start.sh"}]
    assert volumes[mounts["/mnt/shared/config"]]["emptyDir"]["medium"] == "Memory"
    probe = container["readinessProbe"]["exec"]["command"]
    check_the_broker_requires_a_login(
        k8s_kafka_env(K8S_SECRETS),
        probe[2],
        k8s_config()["FLEETWATCH_KAFKA__SASL_USERNAME"],
        K8S_SECRETS["kafka-sasl-password"],
        tmp_path,
    )
    # only the client listener is a Service's port
    for name in ("kafka", "kafka-headless"):
        ports = {p["port"] for p in k8s_workload("Service", name)["spec"]["ports"]}
        assert 9093 not in ports, name


@pytest.mark.parametrize("password", ['with"quote', "with space", "with=equals", ""])
def test_the_broker_s_start_refuses_a_password_it_could_not_write_as_it_is(
    password: str, tmp_path: Path
) -> None:
    env = compose_env("kafka", COMPOSE_KAFKA_LOGIN) | {"CLIENT_SASL_PASSWORD": password}
    result = subprocess.run(
        ["bash", str(KAFKA_START), "true"],
        env={"PATH": os.environ["PATH"], **env, "SASL_CONFIG_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "CLIENT_SASL_PASSWORD" in result.stderr
    assert not (tmp_path / "server.properties").exists()


def test_the_image_s_variable_names_become_the_broker_s_property_names() -> None:
    """The image's renaming rule, on the names the deploy files use and on its own examples."""
    assert kafka_property_name("KAFKA_SASL_ENABLED_MECHANISMS") == "sasl.enabled.mechanisms"
    assert (
        kafka_property_name("KAFKA_SASL_MECHANISM_INTER_BROKER_PROTOCOL")
        == "sasl.mechanism.inter.broker.protocol"
    )
    assert (
        kafka_property_name("KAFKA_LISTENER_NAME_SASL__SSL_SCRAM___SHA___256_SASL_JAAS_CONFIG")
        == "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"
    )
    assert kafka_image_properties(
        {"KAFKA_OPTS": "-Dx", "KAFKA_A_B": "a=b", "CLUSTER_ID": "x", "KAFKA_NODE_ID": "1"}
    ) == {"node.id": "1"}


def test_the_deployed_kafka_cleans_and_creates_topics_as_the_local_stack_s(
    tmp_path: Path,
) -> None:
    local = dict(
        line.split("=", 1)
        for line in KafkaBroker(Settings(run_dir=tmp_path)).render_config().splitlines()
        if "=" in line
    )
    wanted = ("auto.create.topics.enable", "log.cleaner.min.compaction.lag.ms")
    compose_env_ = compose()["services"]["kafka"]["environment"]
    k8s_env = {
        e["name"]: e.get("value")
        for e in k8s_workload("StatefulSet", "kafka")["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    for prop in wanted:
        variable = "KAFKA_" + prop.upper().replace(".", "_")
        assert compose_env_[variable] == local[prop], prop
        assert k8s_env[variable] == local[prop], prop


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


@pytest.mark.parametrize("path", k8s_files(), ids=lambda p: p.relative_to(K8S).as_posix())
def test_every_manifest_is_valid_kubernetes(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_manifest_check_can_fail() -> None:
    deployment = copy.deepcopy(k8s_workload("Deployment", "api"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_applies_every_manifest_but_the_spark_pod_templates() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert kustomization["namespace"] == "fleetwatch"
    (image,) = kustomization["images"]
    assert f"{image['name']}:{image['newTag']}" == IMAGE


def test_every_container_has_resources_and_every_server_its_probes() -> None:
    checked = 0
    for doc in k8s_documents():
        if doc["kind"] not in {"Deployment", "StatefulSet", "Job"}:
            continue
        for spec, containers in pod_specs(doc):
            for container in containers:
                resources = container["resources"]
                for bound in ("requests", "limits"):
                    assert set(resources[bound]) == {"cpu", "memory"}, container["name"]
                checked += 1
            if doc["kind"] != "Job":
                for container in spec["containers"]:
                    assert "readinessProbe" in container, container["name"]
                    assert "livenessProbe" in container, container["name"]
    assert checked >= 9


def test_every_service_selects_pods_and_the_ports_they_name() -> None:
    workloads = [d for d in k8s_documents() if d["kind"] in {"Deployment", "StatefulSet"}]
    for service in (d for d in k8s_documents() if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        pods = [
            w["spec"]["template"]
            for w in workloads
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert pods, service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for pod in pods:
                ports = [p for c in pod["spec"]["containers"] for p in c.get("ports", [])]
                assert any(target in (p.get("name"), p["containerPort"]) for p in ports), (
                    service["metadata"]["name"],
                    target,
                )


def test_secrets_hold_placeholders_only() -> None:
    secrets = [d for d in k8s_documents() if d["kind"] == "Secret"]
    names = {s["metadata"]["name"] for s in secrets}
    assert names == {"fleetwatch-secrets", "mosquitto-passwd", "mosquitto-tls"}
    for secret in secrets:
        assert "data" not in secret
        for key, value in secret["stringData"].items():
            assert "REPLACE_WITH_" in value, key


def test_every_fleetwatch_container_runs_the_one_image() -> None:
    images = set()
    for doc in k8s_documents():
        for _, containers in pod_specs(doc):
            images |= {c["image"] for c in containers if "fleetwatch" in c.get("image", "")}
    assert images == {IMAGE}
    assert interpolate(compose()["services"]["api"]["image"], {}) == IMAGE


@pytest.mark.parametrize(
    "container",
    [c for _, c in fleetwatch_containers()],
    ids=[n for n, _ in fleetwatch_containers()],
)
def test_every_setting_kubernetes_gives_a_fleetwatch_container_is_a_real_setting(
    container: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = container_env(container, k8s_config())
    settings = settings_from(env, monkeypatch, tmp_path)
    if container.get("envFrom"):
        assert settings.kafka.bootstrap_servers == "kafka:9092"
        assert settings.mlflow.tracking_uri == "http://mlflow:5000"
    if "FLEETWATCH_API__DATABASE_URL" in env:
        assert "$(" not in env["FLEETWATCH_API__DATABASE_URL"]
        assert settings.database_url.endswith("@postgres:5432/fleetwatch")


def test_gateway_pods_keep_their_mqtt_client_id_across_restarts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gateway = k8s_workload("StatefulSet", "gateway")
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index("FLEETWATCH_GATEWAY__CLIENT_ID")
    assert env["FLEETWATCH_GATEWAY__CLIENT_ID"]["value"] == "fleetwatch-$(POD_NAME)"
    assert env["FLEETWATCH_GATEWAY__WORKERS"]["value"] == "1"
    assert not [
        d
        for d in k8s_documents()
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"
    ]
    settings = settings_from(
        {"FLEETWATCH_GATEWAY__CLIENT_ID": "fleetwatch-gateway-1"}, monkeypatch, tmp_path
    )
    assert settings.gateway.client_id == "fleetwatch-gateway-1"


def test_exactly_one_api_pod_delivers_webhooks_and_rollouts_never_run_two() -> None:
    delivering = []
    for doc in k8s_documents():
        if doc["kind"] != "Deployment":
            continue
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        if container.get("args") != ["api"]:
            continue
        enabled = container_env(container, k8s_config()).get(
            "FLEETWATCH_API__WEBHOOKS__ENABLED", "true"
        )
        if enabled == "true":
            delivering.append(doc)
    (deliverer,) = delivering
    assert deliverer["spec"]["replicas"] == 1
    assert deliverer["spec"]["strategy"] == {"type": "Recreate"}


def test_the_broker_files_of_the_config_maps_are_the_deploy_files() -> None:
    mosquitto = k8s_workload("ConfigMap", "mosquitto-config")["data"]
    assert mosquitto["mosquitto.conf"] == (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
    assert mosquitto["acl"] == (DEPLOY / "mosquitto" / "acl.example").read_text()
    assert mosquitto["health.acl"] == (DEPLOY / "mosquitto" / "health.acl").read_text()
    kafka = k8s_workload("ConfigMap", "kafka-config")["data"]
    assert kafka["jmx-exporter.yml"] == (DEPLOY / "jvm" / "jmx-exporter" / "kafka.yml").read_text()
    assert kafka["start.sh"] == KAFKA_START.read_text()
    cluster_id = compose()["services"]["kafka"]["environment"]["CLUSTER_ID"]
    assert kafka["cluster-id"] == interpolate(cluster_id, {})
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", kafka["cluster-id"])
    postgres = k8s_workload("ConfigMap", "postgres-init")["data"]
    assert postgres["10-mlflow.sql"] == (DEPLOY / "postgres" / "init" / "10-mlflow.sql").read_text()


@dataclass(frozen=True)
class Submission:
    words: list[str]
    confs: dict[str, str]


def _expand(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)


def submissions() -> dict[str, Submission]:
    """The README's spark-submit, per ``submit JOB PORT`` call, variables expanded."""
    text = (K8S / "README.md").read_text()
    block = next(
        b for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "spark-submit" in b
    )
    variables = dict(re.findall(r"^([A-Z_]+)=(\S+)", block, re.MULTILINE))
    command = block[block.index(".venv/bin/spark-submit") : block.index("\n}")]
    command = command.replace("\\\n", " ")
    out = {}
    for job, port in re.findall(r"^submit (\w+) (\d+)$", block, re.MULTILINE):
        local = variables | {"job": job, "port": port}
        expanded = _expand(command.replace("${job^^}", job.upper()), local)
        words = shlex.split(expanded)
        confs = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--conf")
        out[job] = Submission(words, confs)
    return out


def test_the_scorer_and_the_trainer_are_submitted_in_cluster_mode_as_the_image_needs() -> None:
    jobs = submissions()
    assert set(jobs) == {"score", "train"}
    env = image_env()
    site_packages = env["SPARK_HOME"].removesuffix("/pyspark")
    assert (REPO / "fleetwatch" / "streaming" / "submit.py").exists()
    account = k8s_workload("ServiceAccount", "fleetwatch-spark")["metadata"]["name"]
    for job, submission in jobs.items():
        words, confs = submission.words, submission.confs
        assert words[words.index("--master") + 1].startswith("k8s://")
        assert words[words.index("--deploy-mode") + 1] == "cluster"
        assert words[-2:] == [f"local://{site_packages}/fleetwatch/streaming/submit.py", job]
        assert confs["spark.kubernetes.namespace"] == "fleetwatch"
        assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == account
        for role in ("driver", "executor"):
            assert (REPO / confs[f"spark.kubernetes.{role}.podTemplateFile"]).is_file()
            assert confs[f"spark.{role}.extraClassPath"] == env["FLEETWATCH_SPARK__JARS_DIR"] + "/*"
        assert confs["spark.pyspark.python"] == env["PYSPARK_PYTHON"]
        assert confs["spark.hadoop.fs.file.impl"] == SparkSettings().local_file_system


def test_the_spark_drivers_settings_are_real_settings_and_their_metrics_ports_the_compose_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compose_service = {"score": "scorer", "train": "trainer"}
    prefix = "spark.kubernetes.driverEnv."
    for job, submission in submissions().items():
        driver_env = {
            k.removeprefix(prefix): v for k, v in submission.confs.items() if k.startswith(prefix)
        }
        metrics = f"FLEETWATCH_{job.upper()}__METRICS_PORT"
        assert driver_env[metrics] == str(metrics_ports()[compose_service[job]])
        assert (
            submission.confs["spark.kubernetes.driver.annotation.prometheus.io/port"]
            == (driver_env[metrics])
        )
        template = yaml.safe_load((K8S / "spark" / "driver-pod.yaml").read_text())
        (container,) = template["spec"]["containers"]
        env = container_env(container, k8s_config()) | driver_env
        settings = settings_from(env, monkeypatch, tmp_path)
        assert settings.spark.shuffle_partitions >= 1
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert settings.checkpoint_root == Path(mounts["checkpoints"])


def test_the_spark_driver_may_start_its_executors_and_every_pod_shares_the_checkpoints() -> None:
    role = k8s_workload("Role", "fleetwatch-spark-driver")
    binding = k8s_workload("RoleBinding", "fleetwatch-spark-driver")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fleetwatch-spark"}]
    granted = {
        (resource, verb)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for resource in ("pods", "services", "configmaps"):
        for verb in ("create", "get", "list", "watch", "delete", "deletecollection"):
            assert (resource, verb) in granted, (resource, verb)
    claim = k8s_workload("PersistentVolumeClaim", "spark-checkpoints")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    paths = set()
    for template in ("driver-pod.yaml", "executor-pod.yaml"):
        pod = yaml.safe_load((K8S / "spark" / template).read_text())
        (volume,) = pod["spec"]["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == "spark-checkpoints"
        (mount,) = pod["spec"]["containers"][0]["volumeMounts"]
        paths.add(mount["mountPath"])
    assert len(paths) == 1
