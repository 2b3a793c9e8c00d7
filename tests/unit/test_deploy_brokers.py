"""The brokers as deployed (compose and Kubernetes) against the local stack's and against the
code: Mosquitto's queues, sessions and TLS-only listeners, Kafka's SASL logins (each broker
started for real on the deployed configuration where a JVM is at hand), the secrets no file
writes, the broker image's property names and the topics' settings. Nothing is built."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from fleetwatch.contracts.settings import KafkaSettings, KafkaStage, Settings
from fleetwatch.kafka_config import client_config, spark_options
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.mosquitto import MosquittoBroker
from tests.unit.deploy_support import (
    DEPLOY,
    KAFKA_IMAGE_EXCLUDES,
    KAFKA_START,
    STAGES,
    compose,
    compose_env,
    container_env,
    deployed_kafka,
    fleetwatch_containers,
    fleetwatch_services,
    image_env,
    k8s_config,
    k8s_documents,
    k8s_workload,
    kafka_image_properties,
    kafka_property_name,
    pod_specs,
    settings_from,
)


def _mosquitto_settings(text: str) -> dict[str, str]:
    keep = (
        "persistence ",
        "autosave_interval",
        "max_packet_size",
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
    assert len(_mosquitto_settings(deployed)) == 7
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
    own = (
        *("certfile", "keyfile", "cafile", "allow_anonymous", "password_file", "acl_file"),
        "use_username_as_clientid",
    )
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
    # the devices' and the gateway's (besides them, only the loopback health-check listener)
    assert list(reachable) == [8883, 8884]
    tls, services = reachable[8883], reachable[8884]
    for opts in (tls, services):
        assert opts["certfile"] == "/mosquitto/certs/tls.crt"
        assert opts["keyfile"] == "/mosquitto/certs/tls.key"
        assert opts["allow_anonymous"] == "false"
    # a device's client id is its username; the gateway's listener knows no device account
    assert tls["use_username_as_clientid"] == "true"
    assert "use_username_as_clientid" not in services
    assert tls["password_file"] != services["password_file"]

    # compose: only the TLS port is published; the gateway connects to it over TLS, verifying
    # the broker with the CA of the folder the broker's certificate comes from
    mosquitto = compose()["services"]["mosquitto"]
    assert mosquitto["ports"] == ["8883:8883"]
    broker_mounts = {v["target"]: v["source"] for v in mosquitto["volumes"] if isinstance(v, dict)}
    assert broker_mounts["/mosquitto/certs"] == "./mosquitto/certs"
    env = {k: v for k, v in image_env().items() if k.startswith("FLEETWATCH_")}
    gateway = settings_from(env | compose_env("gateway"), monkeypatch, tmp_path).mqtt
    assert (gateway.host, gateway.port, gateway.tls) == ("mosquitto", 8884, True)
    gateway_volumes = compose()["services"]["gateway"]["volumes"]
    gateway_mounts = {v["target"]: v["source"] for v in gateway_volumes if isinstance(v, dict)}
    assert gateway_mounts[str(gateway.ca_file)] == "./mosquitto/certs/ca.crt"

    # Kubernetes: the Service's port is the TLS listener's; the broker's certificate and key
    # and the gateway's CA come from the one Secret
    service = k8s_workload("Service", "mosquitto")
    ports = [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
    assert ports == [(8883, "mqtts"), (8884, "mqtts-services")]
    broker_pod = k8s_workload("Deployment", "mosquitto")["spec"]["template"]["spec"]
    (broker,) = broker_pod["containers"]
    listening = {p["name"]: p["containerPort"] for p in broker["ports"]}
    assert listening == {"mqtts": 8883, "mqtts-services": 8884}
    files = mounted_secret_files(broker_pod, broker)
    assert files[tls["certfile"]] == ("mosquitto-tls", "tls.crt")
    assert files[tls["keyfile"]] == ("mosquitto-tls", "tls.key")
    secret = k8s_workload("Secret", "mosquitto-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["stringData"]) == {"tls.crt", "tls.key", "ca.crt"}
    gateway_pod = k8s_workload("StatefulSet", "gateway")["spec"]["template"]["spec"]
    (container,) = gateway_pod["containers"]
    k8s = settings_from(container_env(container, k8s_config()), monkeypatch, tmp_path).mqtt
    assert (k8s.host, k8s.port, k8s.tls) == (service["metadata"]["name"], 8884, True)
    ca = mounted_secret_files(gateway_pod, container)[str(k8s.ca_file)]
    assert ca == ("mosquitto-tls", "ca.crt")


KAFKA_STAGES: tuple[KafkaStage, ...] = ("gateway", "scorer", "trainer", "api")

COMPOSE_KAFKA_LOGIN = {
    **{f"KAFKA_{stage.upper()}_PASSWORD": f"{stage}-pw.1" for stage in KAFKA_STAGES},
    "KAFKA_BROKER_PASSWORD": "broker-pw_2",
}
"""deploy/.env's Kafka passwords, as a test gives them (.env.example's are placeholders)."""

K8S_SECRETS = {
    **{f"kafka-{stage}-password": f"{stage}-pw.1" for stage in KAFKA_STAGES},
    "kafka-broker-password": "broker-pw_2",
}
"""fleetwatch-secrets' Kafka passwords, as a test gives them."""

KAFKA_SECURITY = (
    "FLEETWATCH_KAFKA__SECURITY_PROTOCOL",
    "FLEETWATCH_KAFKA__SASL_MECHANISM",
    *(f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__USERNAME" for stage in KAFKA_STAGES),
)
"""What every Kafka client is given: the protocol, the mechanism, every stage's account name."""

COMPOSE_STAGE: dict[str, KafkaStage] = {
    "gateway": "gateway",
    "scorer": "scorer",
    "trainer": "trainer",
    "api": "api",
    "api-replicas": "api",
}
"""Each compose service that is a stage → the Kafka account it logs in as."""


def logged_in_as(kafka: KafkaSettings, stage: KafkaStage | None) -> tuple[str, str]:
    """(user, password) a process logs in with: a stage's own, or (None) the settings'."""
    own = kafka if stage is None else kafka.for_stage(stage)
    config = client_config(own)
    return config["sasl.username"], config["sasl.password"]


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
    """Each stage as its own account, whose password only its service is given; the topics
    job as the broker's own (it creates the ACLs); all of them the accounts the broker has."""
    assert set(kafka_clients_in_compose()) == {*STAGES, "topics", "api-replicas"}
    assert set(COMPOSE_STAGE) == {*STAGES, "api-replicas"}
    image = {k: v for k, v in image_env().items() if k.startswith("FLEETWATCH_")}
    broker = compose_env("kafka", COMPOSE_KAFKA_LOGIN)
    for service in kafka_clients_in_compose():
        raw = compose()["services"][service]["environment"]
        assert set(KAFKA_SECURITY) <= set(raw), service
        shipped = settings_from(
            image | compose_env(service, COMPOSE_KAFKA_LOGIN), monkeypatch, tmp_path
        ).kafka
        assert (shipped.security_protocol, shipped.sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
        stage = COMPOSE_STAGE.get(service)
        user, password = logged_in_as(shipped, stage)
        if stage is None:  # the topics job
            assert (user, password) == ("broker", broker["BROKER_SASL_PASSWORD"])
        else:
            assert user == broker[f"{stage.upper()}_SASL_USERNAME"] == f"fleetwatch-{stage}"
            assert password == broker[f"{stage.upper()}_SASL_PASSWORD"] == f"{stage}-pw.1"
            # no other stage's password in its environment
            others = {p.get_secret_value() for s, p in _passwords(shipped).items() if s != stage}
            assert others == set(), service
            jaas = spark_options(shipped.for_stage(stage))["kafka.sasl.jaas.config"]
            assert f'username="{user}" password="{password}"' in jaas, service
        for each in KAFKA_STAGES:  # the topics job knows every account's name: the ACLs'
            assert shipped.principal(each) == f"fleetwatch-{each}"

    own_cluster = {
        "KAFKA_BOOTSTRAP_SERVERS": "kafka-1.example.com:9096",
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "KAFKA_GATEWAY_USERNAME": "gw",
        "KAFKA_GATEWAY_PASSWORD": "s3cret",
        "KAFKA_ADMIN_USERNAME": "admin",
    }
    example = (DEPLOY / ".env.example").read_text()
    for name in own_cluster:
        assert re.search(rf"^#? ?{name}=", example, re.MULTILINE), name
    for service in kafka_clients_in_compose():
        env = image | compose_env(service, COMPOSE_KAFKA_LOGIN | own_cluster)
        own = settings_from(env, monkeypatch, tmp_path).kafka
        stage = COMPOSE_STAGE.get(service)
        config = client_config(own.for_stage(stage) if stage else own)
        assert config["bootstrap.servers"] == "kafka-1.example.com:9096", service
        assert config["security.protocol"] == "SASL_SSL", service
        assert config["sasl.mechanisms"] == "SCRAM-SHA-256", service
        assert own.principal("gateway") == "gw"
        if service == "gateway":
            assert (config["sasl.username"], config["sasl.password"]) == ("gw", "s3cret")
        if service == "topics":
            assert config["sasl.username"] == "admin"


def _passwords(kafka: KafkaSettings) -> dict[str, SecretStr]:
    return {s: login.password for s, login in kafka.logins.items() if login.password is not None}


def kafka_clients_in_kubernetes() -> dict[str, dict[str, Any]]:
    """The containers that are Kafka clients: every one that reads fleetwatch-config."""
    return {name: c for name, c in fleetwatch_containers() if c.get("envFrom")}


def test_every_fleetwatch_container_logs_in_to_kafka_with_the_secret_s_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each stage's container has its own account's password from the Secret the broker takes
    it from (the Spark driver's template the scorer's and the trainer's), the topics Job the
    broker's own; the account names, from the ConfigMap, are the broker's."""
    clients = kafka_clients_in_kubernetes()
    stages: dict[str, list[KafkaStage]] = {
        "StatefulSet/gateway": ["gateway"],
        "Deployment/api-webhooks": ["api"],
        "Deployment/api": ["api"],
        "Job/topics": [],
        "Pod/Pod": ["scorer", "trainer"],  # the Spark driver's template (executors: its login)
    }
    assert set(clients) == set(stages)
    broker = {e["name"]: e["valueFrom"] for e in k8s_kafka_container()["env"] if "valueFrom" in e}
    for stage in KAFKA_STAGES:
        key = f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__USERNAME"
        assert broker[f"{stage.upper()}_SASL_USERNAME"]["configMapKeyRef"] == {
            "name": "fleetwatch-config",
            "key": key,
        }
        assert k8s_config()[key] == f"fleetwatch-{stage}"
    for name, container in clients.items():
        env = container_env(container, k8s_config())
        assert set(KAFKA_SECURITY) <= set(env), name
        secrets = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in container["env"]
            if "secretKeyRef" in e.get("valueFrom", {}) and "KAFKA" in e["name"]
        }
        expected = {
            f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__PASSWORD": broker[
                f"{stage.upper()}_SASL_PASSWORD"
            ]["secretKeyRef"]
            for stage in stages[name]
        } or {"FLEETWATCH_KAFKA__SASL_PASSWORD": broker["BROKER_SASL_PASSWORD"]["secretKeyRef"]}
        assert secrets == expected, name
        kafka = settings_from(env, monkeypatch, tmp_path).kafka
        assert (kafka.security_protocol, kafka.sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
        for stage in stages[name]:
            assert logged_in_as(kafka, stage)[0] == f"fleetwatch-{stage}", name
        if not stages[name]:
            assert kafka.sasl_username == "broker"


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
    env: dict[str, str], probe: str, accounts: dict[str, str], workdir: Path
) -> None:
    """The broker a container with ``env`` runs accepts clients only with a SASL login, each
    stage's account (``accounts``: user → password) among its accounts, and ``probe`` (its
    health check's command) logs in as the broker's own account."""
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
    # the controller's listener: only this process reaches it, logged in as the broker
    assert protocols.pop(controller) == "SASL_PLAINTEXT"
    assert bound.pop(controller)[0] == "127.0.0.1"
    broker_password = env["BROKER_SASL_PASSWORD"]
    own = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{broker_password}" user_broker="{broker_password}";'
    )
    assert props[f"listener.name.{controller.lower()}.plain.sasl.jaas.config"] == own
    assert props["sasl.mechanism.controller.protocol"] == "PLAIN"
    # every request authorized: the broker may do anything, the stages what their ACLs say
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    assert props["super.users"] == "User:broker"
    assert props["controller.quorum.voters"].split("@")[1] == "127.0.0.1:{}".format(
        listeners(props["listeners"])[controller][1]
    )
    assert set(protocols) == set(bound) == set(listeners(props["advertised.listeners"]))
    assert set(protocols.values()) == {"SASL_PLAINTEXT"}
    assert props["inter.broker.listener.name"] in protocols
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert props["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    for listener in protocols:
        jaas = props[f"listener.name.{listener.lower()}.plain.sasl.jaas.config"]
        assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")
        assert f'username="broker" password="{broker_password}"' in jaas
        assert f'user_broker="{broker_password}"' in jaas
        for user, password in accounts.items():
            assert f'user_{user}="{password}"' in jaas
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
    accounts = {}
    for stage in KAFKA_STAGES:
        client = compose_env(stage, COMPOSE_KAFKA_LOGIN)
        user = client[f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__USERNAME"]
        accounts[user] = client[f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__PASSWORD"]
    assert len(set(accounts)) == len(set(accounts.values())) == 4
    check_the_broker_requires_a_login(env, kafka["healthcheck"]["test"][1], accounts, tmp_path)


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
    accounts = {
        k8s_config()[f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__USERNAME"]: K8S_SECRETS[
            f"kafka-{stage}-password"
        ]
        for stage in KAFKA_STAGES
    }
    check_the_broker_requires_a_login(k8s_kafka_env(K8S_SECRETS), probe[2], accounts, tmp_path)
    # only the client listener is a Service's port
    for name in ("kafka", "kafka-headless"):
        ports = {p["port"] for p in k8s_workload("Service", name)["spec"]["ports"]}
        assert 9093 not in ports, name


@pytest.mark.parametrize("password", ['with"quote', "with space", "with=equals", ""])
def test_the_broker_s_start_refuses_a_password_it_could_not_write_as_it_is(
    password: str, tmp_path: Path
) -> None:
    env = compose_env("kafka", COMPOSE_KAFKA_LOGIN) | {"API_SASL_PASSWORD": password}
    result = subprocess.run(
        ["bash", str(KAFKA_START), "true"],
        env={"PATH": os.environ["PATH"], **env, "SASL_CONFIG_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "API_SASL_PASSWORD" in result.stderr
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
