"""Each stage's Kafka rights, as ACLs for the broker's ``StandardAuthorizer``, and the SCRAM
accounts the local broker keeps: who reads and writes which topic, with which consumer group.

The rights follow the code (what each stage produces to, consumes from, and its groups):

- ``gateway`` writes ``telemetry.raw``, the dead letters and the command acks; reads the
  commands in the group ``{gateway.share_group}-commands``;
- ``scorer`` reads ``telemetry.raw`` and ``model.params``; writes the alerts, the device state
  and sessions, the late readings and the dead letters;
- ``trainer`` reads ``telemetry.raw`` and ``model.params``; writes ``model.params``; its
  backfill registers fleet models after reading ``model.params`` (group
  ``fleetwatch-fleet-models``);
- ``api`` reads what it materialises (alerts, state, sessions, acks, ``model.params``,
  ``telemetry.raw``, and the dead letters for a device's rate-limited run) in the groups named
  after ``api.consumer_group`` (its webhooks' too);
  writes the commands, the dead letters, and ``model.params`` (a quarantine lift is a record
  there, :meth:`fleetwatch.serving.control.publisher.KafkaCommandPublisher.lift_quarantine`).

Spark's Kafka source (scorer, trainer) names its consumers ``spark-kafka-source-…``: those
groups are theirs. READ and WRITE imply DESCRIBE; an idempotent producer needs WRITE on a topic
only (Kafka ≥ 3.0). The shared account (``kafka.sasl_username``), which the stages without an
account of their own and the tools log in with, gets every stage's rights and may create and
describe the topics (``fleetwatch topics create``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, get_args

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from fleetwatch.contracts.settings import KafkaSettings, KafkaStage, Settings
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.errors import StackError

logger = logging.getLogger(__name__)

STAGES: tuple[KafkaStage, ...] = get_args(KafkaStage)

SPARK_GROUPS = "spark-kafka-source"
"""The prefix of the consumer groups Spark's Kafka source makes (its ``groupIdPrefix``)."""

TOOL_GROUPS = "fleetwatch"
"""The prefix of the tools' consumer groups (``fleetwatch-end-offsets``, …)."""

SCRAM_ITERATIONS = 8192

_READ, _WRITE = AclOperation.READ, AclOperation.WRITE


@dataclass(frozen=True, order=True)
class Grant:
    """One right: ``operation`` on a topic, a group or the cluster, by name or name prefix."""

    resource: str
    """``topic``, ``group`` or ``cluster``."""
    name: str
    operation: str
    """An :class:`AclOperation` name: ``READ``, ``WRITE``, ``CREATE``, …"""
    prefixed: bool = False


def _topics(names: Iterable[str], operation: AclOperation) -> set[Grant]:
    return {Grant("topic", name, operation.name) for name in names}


def _group(name: str, prefixed: bool = False) -> Grant:
    return Grant("group", name, _READ.name, prefixed)


def stage_grants(settings: Settings, stage: KafkaStage) -> set[Grant]:
    """Exactly what ``stage`` needs."""
    t = settings.topics
    if stage == "gateway":
        return (
            _topics([t.telemetry_raw, t.telemetry_deadletter, t.device_command_acks], _WRITE)
            | _topics([t.device_commands], _READ)
            | {_group(f"{settings.gateway.share_group}-commands")}
        )
    if stage == "scorer":
        written = [t.alerts, t.alerts_fast, t.device_state, t.device_sessions, t.telemetry_late]
        return (
            _topics([t.telemetry_raw, t.model_params, t.quarantine_lifts, t.rules], _READ)
            | _topics([*written, t.telemetry_deadletter], _WRITE)
            | {_group(SPARK_GROUPS, prefixed=True)}
        )
    if stage == "trainer":
        return (
            _topics([t.telemetry_raw, t.model_params], _READ)
            | _topics([t.model_params], _WRITE)
            | {_group(SPARK_GROUPS, prefixed=True), _group("fleetwatch-fleet-models")}
        )
    materialised = [
        t.alerts,
        t.alerts_fast,
        t.device_state,
        t.device_sessions,
        t.device_command_acks,
    ]
    groups = {_group(settings.api.consumer_group, prefixed=True)}
    if settings.api.webhooks.consumer_group:
        groups.add(_group(settings.api.webhooks.consumer_group))
    return (
        _topics([*materialised, t.model_params, t.telemetry_raw, t.telemetry_deadletter], _READ)
        | _topics([t.device_commands, t.telemetry_deadletter, t.quarantine_lifts, t.rules], _WRITE)
        | groups
    )


def shared_grants(settings: Settings) -> set[Grant]:
    """The shared account's: every stage's, and creating and describing the topics."""
    names = [spec.name for spec in topic_specs(settings.topics)]
    admin = _topics(names, AclOperation.CREATE) | _topics(names, AclOperation.DESCRIBE_CONFIGS)
    return (
        set().union(*(stage_grants(settings, s) for s in STAGES))
        | admin
        | {_group(TOOL_GROUPS, prefixed=True)}
    )


def grants(settings: Settings, shared: bool = True) -> dict[str, set[Grant]]:
    """Each principal's rights (``User:name``): each stage's account its stage's; the shared
    account, when set and ``shared``, :func:`shared_grants`. Two stages with one account get
    both's."""
    k = settings.kafka
    out: dict[str, set[Grant]] = {}
    if k.sasl_username and shared:
        out[f"User:{k.sasl_username}"] = shared_grants(settings)
    for stage, login in k.logins.items():
        out.setdefault(f"User:{login.username}", set()).update(stage_grants(settings, stage))
    return out


_ANY: Any = None
"""A filter's "any name, principal or host" (confluent-kafka's stubs say ``str``)."""

_EVERY_ACL = AclBindingFilter(
    ResourceType.ANY,
    _ANY,
    ResourcePatternType.ANY,
    _ANY,
    _ANY,
    AclOperation.ANY,
    AclPermissionType.ANY,
)

_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}


def bindings(settings: Settings, shared: bool = True) -> list[AclBinding]:
    """:func:`grants` as the Admin API's ACL bindings (from any host)."""
    out = []
    for principal, granted in sorted(grants(settings, shared).items()):
        for g in sorted(granted):
            pattern = ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL
            out.append(
                AclBinding(
                    _RESOURCES[g.resource],
                    g.name,
                    pattern,
                    principal,
                    "*",
                    AclOperation[g.operation],
                    AclPermissionType.ALLOW,
                )
            )
    return out


def apply_acls(
    admin_kafka: KafkaSettings, wanted: list[AclBinding], timeout_s: float = 30.0
) -> None:
    """Create ``wanted`` on the cluster (an ACL already there is kept as it is), logged in as
    ``admin_kafka``'s account, which needs ALTER on the cluster (or is a super user); return
    once the broker answering lists them all (the controller commits an ACL before the
    brokers' authorizers apply it)."""
    if not wanted:
        return
    admin = AdminClient(client_config(admin_kafka))
    for binding, future in admin.create_acls(wanted, request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as exc:
            raise StackError(f"could not create the ACL {binding}: {exc.args[0]}") from exc
    deadline = time.monotonic() + timeout_s
    missing = set(wanted)
    while missing:
        missing -= set(admin.describe_acls(_EVERY_ACL, request_timeout=timeout_s).result())
        if missing and time.monotonic() > deadline:
            raise StackError(f"{len(missing)} ACLs created but not applied in {timeout_s:.0f}s")
        if missing:
            time.sleep(0.1)
    logger.info("%d ACLs in place", len(wanted))


def scram_accounts(kafka: KafkaSettings) -> dict[str, str]:
    """The accounts the local broker keeps with a SCRAM mechanism: the shared one and each
    stage's that has a password, username → password."""
    out = {}
    if kafka.sasl_username and kafka.sasl_password:
        out[kafka.sasl_username] = kafka.sasl_password.get_secret_value()
    for login in kafka.logins.values():
        if login.password is not None:
            out[login.username] = login.password.get_secret_value()
    return out


def upsert_scram_accounts(
    admin_kafka: KafkaSettings, accounts: dict[str, str], timeout_s: float = 30.0
) -> None:
    """Create or update ``accounts`` with the settings' SCRAM mechanism, logged in as
    ``admin_kafka``'s account (a super user)."""
    if not accounts:
        return
    mechanism = ScramMechanism[admin_kafka.sasl_mechanism.replace("-", "_")]
    info = ScramCredentialInfo(mechanism, SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, info, password.encode())
        for user, password in sorted(accounts.items())
    ]
    admin = AdminClient(client_config(admin_kafka))
    futures = admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s)
    for user, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            raise StackError(f"could not set the SCRAM account {user!r}: {exc.args[0]}") from exc
    logger.info("%d SCRAM accounts in place", len(upserts))
