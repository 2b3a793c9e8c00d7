"""The alerting rules of deploy/prometheus/rules/: each file's promtool unit tests pass and
fire every alert it defines; every rule has a severity, a summary and a description; every
metric and label a rule names is one fleetwatch exports (a renamed metric fails here, not on a
quiet night); and the local stack's Prometheus, compose's and the Kubernetes one all load
these files, scrape under the job names they use, and time a scrape out before the next is due.

promtool is Debian's (``make setup`` installs the ``prometheus`` package)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from fleetwatch.contracts.settings import PrometheusSettings, Settings
from fleetwatch.ingest.broker_stats import PREFIX as MOSQUITTO_PREFIX
from fleetwatch.ingest.broker_stats import SYS_TOPICS
from fleetwatch.ingest.metrics import GatewayMetrics
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store
from fleetwatch.stack.prometheus import STAGE_JOBS, PrometheusServer
from fleetwatch.streaming.progress_metrics import ProgressMetrics
from fleetwatch.streaming.scorer.batch_counts import ScorerMetrics
from fleetwatch.streaming.trainer.metrics import TrainerMetrics
from tests.unit.deploy_support import DEPLOY, compose, k8s_workload
from tests.unit.test_deploy_k8s import submissions

RULES = DEPLOY / "prometheus" / "rules"
TESTS = Path(__file__).parent / "prometheus"
RULE_FILES = sorted(RULES.glob("*.yml"))
TARGET_LABELS = frozenset({"job", "instance"})
"""Labels every scraped series has besides its own."""
SEVERITIES = ("critical", "warning")


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make setup` installs Debian's prometheus package"
    return found


def rules_of(path: Path) -> list[dict[str, Any]]:
    loaded = yaml.safe_load(path.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def every_rule() -> Iterator[dict[str, Any]]:
    for path in RULE_FILES:
        yield from rules_of(path)


def test_there_are_rules_and_each_file_has_its_promtool_tests() -> None:
    assert {p.stem for p in RULE_FILES} == {"stages", "streaming", "ingest", "serving"}
    for path in RULE_FILES:
        tests = yaml.safe_load((TESTS / f"{path.stem}.test.yml").read_text())
        named = [(TESTS / f).resolve() for f in tests["rule_files"]]
        assert named == [path.resolve()], f"{path.stem}.test.yml tests {named}"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.stem)
def test_the_rules_pass_their_promtool_tests(path: Path) -> None:
    tests = TESTS / f"{path.stem}.test.yml"
    result = subprocess.run(
        [promtool(), "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.stem)
def test_every_alert_is_seen_firing_in_its_tests(path: Path) -> None:
    tests = yaml.safe_load((TESTS / f"{path.stem}.test.yml").read_text())
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {rule["alert"] for rule in rules_of(path)} == fired


def test_a_rule_that_changes_fails_its_tests(tmp_path: Path) -> None:
    """The tests pin the rules: a longer ``for:`` of the stage-down alert is caught."""
    rules, tests = tmp_path / "rules", tmp_path / "tests"
    rules.mkdir()
    tests.mkdir()
    text = (RULES / "stages.yml").read_text()
    assert text.count("        for: 1m\n") == 1
    (rules / "stages.yml").write_text(text.replace("        for: 1m\n", "        for: 2m\n"))
    shutil.copy(TESTS / "stages.test.yml", tests / "stages.test.yml")
    result = subprocess.run(
        [promtool(), "test", "rules", str(tests / "stages.test.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "FleetwatchStageDown" in result.stdout + result.stderr


def test_every_rule_has_a_duration_a_severity_a_summary_a_description_and_a_comment() -> None:
    for path in RULE_FILES:
        lines = path.read_text().splitlines()
        for rule in rules_of(path):
            name = rule["alert"]
            assert name.startswith("Fleetwatch"), name
            assert re.fullmatch(r"\d+[smh]", rule["for"]), name
            assert rule["labels"]["severity"] in SEVERITIES, name
            assert set(rule["annotations"]) == {"summary", "description"}, name
            at = lines.index(f"      - alert: {name}")
            assert lines[at - 1].lstrip().startswith("#"), f"{name}: say where its bound is from"


# --- what the rules name against what fleetwatch exports -----------------------------------


def exported() -> dict[str, frozenset[str]]:
    """Every series name fleetwatch's stages export (a counter's with ``_total``, a
    histogram's ``_bucket``, ``_sum`` and ``_count``) → its label names."""
    registries = [CollectorRegistry() for _ in range(3)]
    ProgressMetrics(registries[0])
    ScorerMetrics(registries[1])
    TrainerMetrics(registries[2])
    api = Metrics()
    api.watch_fleet(Store("sqlite://"))
    registries += [GatewayMetrics().registry, api.registry]

    out: dict[str, frozenset[str]] = {}

    def add(name: str, kind: str, labels: set[str]) -> None:
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        for suffix in suffixes.get(kind, [""]):
            extra = {"le"} if suffix == "_bucket" else set()
            out[name + suffix] = out.get(name + suffix, frozenset()) | labels | extra

    for registry in registries:
        for family in registry.collect():
            add(family.name, family.type, {k for s in family.samples for k in s.labels})
        # a labelled metric shows its labels only once a child exists: ask the metric itself
        for collector in registry._collector_to_names:
            if isinstance(collector, MetricWrapperBase):
                add(collector._name, str(collector._type), set(collector._labelnames))
    for topic in SYS_TOPICS.values():
        add(MOSQUITTO_PREFIX + topic.name, topic.kind, set())
    return out


SELECTOR = re.compile(r"\b(fleetwatch_\w+)(?:\{([^}]*)\})?")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def test_the_catalogue_of_exported_metrics_is_complete() -> None:
    catalogue = exported()
    assert catalogue["fleetwatch_streaming_source_offsets_behind_latest"] >= {"query", "source"}
    assert catalogue["fleetwatch_gateway_dead_lettered_total"] == {"reason"}
    assert "fleetwatch_api_webhook_oldest_pending_seconds" in catalogue
    assert "fleetwatch_score_quarantined_devices" in catalogue
    assert "fleetwatch_mosquitto_clients_connected" in catalogue


@pytest.mark.parametrize("rule", list(every_rule()), ids=lambda r: str(r["alert"]))
def test_every_metric_and_label_a_rule_names_is_exported(rule: dict[str, Any]) -> None:
    catalogue = exported()
    expr = str(rule["expr"])
    named = SELECTOR.findall(expr)
    assert named or "up{" in expr, f"{rule['alert']} names no fleetwatch metric"
    labels_in_play = set(TARGET_LABELS)
    for metric, matchers in named:
        assert metric in catalogue, f"{rule['alert']}: no stage exports {metric}"
        labels = catalogue[metric] | TARGET_LABELS
        labels_in_play |= labels
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
            assert label in labels, f"{rule['alert']}: {metric} has no label {label!r}"
    for grouping in GROUPING.findall(expr):
        for label in (g.strip() for g in grouping.split(",") if g.strip()):
            assert label in labels_in_play, f"{rule['alert']}: no metric has the label {label!r}"


def rule_jobs() -> set[str]:
    jobs: set[str] = set()
    for rule in every_rule():
        for value in re.findall(r'job=~?"([^"]+)"', str(rule["expr"])):
            jobs |= set(value.split("|"))
    return jobs


def test_the_rules_name_the_scrape_jobs_of_every_stage() -> None:
    assert rule_jobs() == {*STAGE_JOBS, "kafka"}


# --- loaded everywhere ---------------------------------------------------------------------


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+)(ms|s|m|h)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def assert_scrapes_time_out_before_the_next(config: dict[str, Any]) -> None:
    default = config["global"]
    assert seconds(default["scrape_timeout"]) < seconds(default["scrape_interval"])
    for job in config["scrape_configs"]:
        interval = job.get("scrape_interval", default["scrape_interval"])
        timeout = job.get("scrape_timeout", default["scrape_timeout"])
        assert seconds(timeout) < seconds(interval), job["job_name"]


def promtool_check_config(config: dict[str, Any], tmp_path: Path) -> None:
    """``promtool check config`` of ``config`` with its rules read from the repository."""
    config = config | {"rule_files": [str(RULES / "*.yml")]}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool(), "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout


@pytest.mark.parametrize("interval_s", [1, 2, 15])
def test_the_local_prometheus_loads_the_rules_and_times_scrapes_out_early(
    tmp_path: Path, interval_s: int
) -> None:
    settings = Settings(
        run_dir=tmp_path, prometheus=PrometheusSettings(scrape_interval_s=interval_s)
    )
    server = PrometheusServer(settings)
    config = yaml.safe_load(server.render_config())
    assert config["rule_files"] == [str(RULES.resolve() / "*.yml")]
    assert config["global"]["evaluation_interval"] == f"{interval_s}s"
    assert_scrapes_time_out_before_the_next(config)
    own = PrometheusServer(
        Settings(run_dir=tmp_path, prometheus=PrometheusSettings(rules_dir=tmp_path))
    )
    assert yaml.safe_load(own.render_config())["rule_files"] == [str(tmp_path / "*.yml")]


def test_compose_mounts_the_rules_where_its_prometheus_reads_them(tmp_path: Path) -> None:
    volumes = compose()["services"]["prometheus"]["volumes"]
    mounts = dict(v.split(":")[:2] for v in volumes if v.startswith("./"))
    assert (DEPLOY / "prometheus" / "rules").resolve() == RULES.resolve()
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == [mounts["./prometheus/rules"] + "/*.yml"]
    assert {job["job_name"] for job in config["scrape_configs"]} >= rule_jobs()
    assert_scrapes_time_out_before_the_next(config)
    promtool_check_config(config, tmp_path)


def test_kubernetes_mounts_copies_of_the_rules_where_its_prometheus_reads_them(
    tmp_path: Path,
) -> None:
    copies = k8s_workload("ConfigMap", "prometheus-rules")["data"]
    assert copies == {p.name: p.read_text() for p in RULE_FILES}, "copy deploy/prometheus/rules"
    rendered = k8s_workload("ConfigMap", "prometheus-config")["data"]["prometheus.yml"]
    config = yaml.safe_load(rendered)
    deployment = k8s_workload("Deployment", "prometheus")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {
        volumes[m["name"]]["configMap"]["name"]: m["mountPath"]
        for m in container["volumeMounts"]
        if "configMap" in volumes[m["name"]]
    }
    assert config["rule_files"] == [mounts["prometheus-rules"] + "/*.yml"]
    assert f"--config.file={mounts['prometheus-config']}" in container["args"]
    assert container["image"] == compose()["services"]["prometheus"]["image"]
    assert_scrapes_time_out_before_the_next(config)
    # Debian's promtool is built without Kubernetes discovery: checked with the pods' job
    # discovering nothing, the rest (its relabelling, the rules) as they are
    checkable = yaml.safe_load(yaml.safe_dump(config))
    for job in checkable["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": []}]
    promtool_check_config(checkable, tmp_path)

    # the jobs its relabelling makes are the ones the rules name; the Spark drivers' by the
    # application names the README's spark-submit gives them
    (pods,) = [j for j in config["scrape_configs"] if j["job_name"] == "fleetwatch-pods"]
    made: set[str] = set()
    for step in pods["relabel_configs"]:
        if step.get("target_label") != "job":
            continue
        if "replacement" in step:
            made.add(step["replacement"])
            app = step["regex"].split(";")[-1]
            job = {"scorer": "score", "trainer": "train"}[step["replacement"]]
            words = submissions()[job].words
            assert words[words.index("--name") + 1] == app
        else:
            made |= set(step["regex"].strip("()").split("|"))
    assert made == rule_jobs()
    role = k8s_workload("Role", "prometheus")
    assert {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]} >= {
        ("pods", "list"),
        ("pods", "watch"),
    }
    account = k8s_workload("ServiceAccount", "prometheus")["metadata"]["name"]
    assert spec["serviceAccountName"] == account
