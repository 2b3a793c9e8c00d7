"""The Kubernetes manifests against Kubernetes 1.33's API schemas (kubernetes-validate) and
against the code: resources and probes, services and their ports, the one image, the settings
they set, the gateway's client ids, the one webhook-delivering API pod, the broker files of
the config maps, and the spark-submit command of deploy/k8s/README.md. Nothing is built."""

from __future__ import annotations

import copy
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from fleetwatch.contracts.settings import SparkSettings
from tests.unit.deploy_support import (
    DEPLOY,
    IMAGE,
    K8S,
    KAFKA_START,
    REPO,
    compose,
    container_env,
    fleetwatch_containers,
    image_env,
    interpolate,
    k8s_config,
    k8s_documents,
    k8s_files,
    k8s_workload,
    metrics_ports,
    pod_specs,
    settings_from,
)

KUBERNETES_VERSION = "1.33.0"
"""The API the manifests are checked against (kubernetes-validate ships 1.25 to 1.37)."""


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
        assert settings.checkpoint_root == mounts["checkpoints"]


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
