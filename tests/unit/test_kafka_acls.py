"""Each stage's Kafka account and its rights (fleetwatch.stack.acls): what the code of each
stage writes and reads is granted to its account and nothing else, whichever the topics' names;
the shared account, which the stages without an account of their own use, gets all of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from pydantic import ValidationError

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.stack.acls import STAGES, Grant, bindings, grants, scram_accounts, stage_grants

SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "fw", "sasl_password": "pw"}


def settings(**kafka: object) -> Settings:
    return Settings(_env_file=None, kafka=KafkaSettings.model_validate(SASL | kafka))


def topics_with(granted: set[Grant], operation: str) -> set[str]:
    return {g.name for g in granted if g.resource == "topic" and g.operation == operation}


def test_each_stage_writes_and_reads_the_topics_its_code_does() -> None:
    s = settings()
    t = s.topics
    gateway, scorer = stage_grants(s, "gateway"), stage_grants(s, "scorer")
    trainer, api = stage_grants(s, "trainer"), stage_grants(s, "api")
    assert topics_with(gateway, "WRITE") == {
        t.telemetry_raw,
        t.telemetry_deadletter,
        t.device_command_acks,
    }
    assert topics_with(gateway, "READ") == {t.device_commands}
    assert topics_with(scorer, "READ") == {
        t.telemetry_raw,
        t.model_params,
        t.quarantine_lifts,
        t.rules,
    }
    assert topics_with(scorer, "WRITE") == {
        t.alerts,
        t.alerts_fast,
        t.device_state,
        t.device_sessions,
        t.telemetry_late,
        t.telemetry_deadletter,
    }
    assert topics_with(trainer, "WRITE") == {t.model_params}
    assert t.telemetry_raw not in topics_with(api, "WRITE")
    assert topics_with(api, "WRITE") == {
        t.device_commands,
        t.telemetry_deadletter,
        t.quarantine_lifts,
        t.rules,
    }
    # nobody but the gateway writes telemetry, nobody but the trainer model.params

    def writers(topic: str) -> set[str]:
        return {stage for stage in STAGES if topic in topics_with(stage_grants(s, stage), "WRITE")}

    assert writers(t.telemetry_raw) == {"gateway"}
    assert writers(t.model_params) == {"trainer"}
    assert writers(t.rules) == {"api"}
    # every topic someone writes, someone reads (but the late readings, for people); the API
    # reads the dead letters for the devices the gateway rate-limits
    read = set().union(*(topics_with(stage_grants(s, st), "READ") for st in STAGES))
    assert {spec.name for spec in topic_specs(t)} - read == {t.telemetry_late}
    assert t.telemetry_deadletter in topics_with(api, "READ")


def test_each_stage_s_groups_follow_its_settings() -> None:
    s = Settings.model_validate(
        {
            "_env_file": None,
            "kafka": SASL,
            "gateway": {"share_group": "gw"},
            "api": {"consumer_group": "api-x", "webhooks": {"consumer_group": "hooks"}},
        }
    )
    groups = {
        stage: {(g.name, g.prefixed) for g in stage_grants(s, stage) if g.resource == "group"}
        for stage in STAGES
    }
    assert groups["gateway"] == {("gw-commands", False)}
    assert groups["api"] == {("api-x", True), ("hooks", False)}
    assert ("spark-kafka-source", True) in groups["scorer"]
    assert ("spark-kafka-source", True) in groups["trainer"]


def test_each_account_gets_its_stage_s_rights_and_the_shared_one_all() -> None:
    s = settings(
        logins={
            "gateway": {"username": "fw-gateway", "password": "g"},
            "api": {"username": "fw-api"},  # granting needs the name alone
        }
    )
    by_principal = grants(s)
    assert set(by_principal) == {"User:fw", "User:fw-gateway", "User:fw-api"}
    assert by_principal["User:fw-gateway"] == stage_grants(s, "gateway")
    assert by_principal["User:fw-api"] == stage_grants(s, "api")
    every = set().union(*(stage_grants(s, stage) for stage in STAGES))
    assert by_principal["User:fw"] >= every
    assert topics_with(by_principal["User:fw"], "CREATE") == {
        spec.name for spec in topic_specs(s.topics)
    }
    acl = [b for b in bindings(s) if b.principal == "User:fw-api"]
    assert len(acl) == len(stage_grants(s, "api"))
    assert {b.permission_type for b in acl} == {AclPermissionType.ALLOW}
    assert {b.host for b in acl} == {"*"}
    raw = [b for b in acl if b.name == s.topics.telemetry_raw]
    assert [(b.restype, b.operation, b.resource_pattern_type) for b in raw] == [
        (ResourceType.TOPIC, AclOperation.READ, ResourcePatternType.LITERAL)
    ]
    assert scram_accounts(s.kafka) == {"fw": "pw", "fw-gateway": "g"}


def test_a_stage_logs_in_with_its_own_account_or_the_shared_one() -> None:
    s = settings(
        logins={"scorer": {"username": "fw-scorer", "password": "sc"}, "api": {"username": "a"}}
    )
    scorer = s.kafka.for_stage("scorer")
    assert (scorer.sasl_username, scorer.sasl_password.get_secret_value()) == ("fw-scorer", "sc")  # type: ignore[union-attr]
    assert s.kafka.for_stage("gateway") is s.kafka
    assert s.kafka.principal("gateway") == "fw"
    assert s.kafka.principal("scorer") == "fw-scorer"
    with pytest.raises(ConfigurationError, match="FLEETWATCH_KAFKA__LOGINS__API__PASSWORD"):
        s.kafka.for_stage("api")


def test_stage_logins_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in {
        "FLEETWATCH_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "FLEETWATCH_KAFKA__SASL_USERNAME": "fw",
        "FLEETWATCH_KAFKA__SASL_PASSWORD": "pw",
        "FLEETWATCH_KAFKA__LOGINS__GATEWAY__USERNAME": "fw-gateway",
        "FLEETWATCH_KAFKA__LOGINS__GATEWAY__PASSWORD": "g",
    }.items():
        monkeypatch.setenv(name, value)
    kafka = Settings().kafka
    assert kafka.for_stage("gateway").sasl_username == "fw-gateway"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"logins": {"api": {"username": "a", "password": "p"}}}, "kafka.logins is set but"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_username": "u",
                "sasl_password": "p",
                "logins": {"mqtt": {"username": "a"}},
            },
            "logins.mqtt",
        ),
    ],
)
def test_stage_logins_that_cannot_work_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaSettings.model_validate(fields)
