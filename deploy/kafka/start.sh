#!/usr/bin/env bash
# The Kafka broker's start in deploy/compose.yaml and deploy/k8s/kafka.yaml (apache/kafka
# image; k8s/config.yaml holds a copy, a unit test keeps them equal). It writes the SASL PLAIN
# accounts of every SASL listener, and a client configuration the health check logs in with,
# then runs the image's own start (its arguments).
#
# Why a file and not a KAFKA_LISTENER_NAME_…_SASL_JAAS_CONFIG variable: the image turns every
# KAFKA_* variable into a property, but it splits each NAME=VALUE at every "=" and silently skips
# a variable with more than one (apache/kafka docker/resources/utility: ListToMap), and a JAAS
# configuration always holds some. The image appends its properties to a server.properties
# found in /mnt/shared/config, so the accounts go there.
#
# PLAIN, because the broker's accounts must exist when it starts: SCRAM accounts live in the
# cluster's metadata and are made by kafka-storage.sh format --add-scram or kafka-configs.sh,
# which the image does not do from its environment. PLAIN sends the password itself, so it is
# for the private Compose network or namespace only (deploy/README.md, "Kafka").
#
# Accounts: the broker's own, "broker" (between brokers, to the controller, the health check,
# and the super user of the authorizer), on every SASL listener; one per stage (gateway, scorer,
# trainer, API), each with only its stage's ACLs (`fleetwatch topics create --acls`), on every
# SASL listener but the controller's.
#
# Environment (no KAFKA_ prefix: the image would make properties of them):
#   BROKER_SASL_PASSWORD    the broker's own account, "broker"
#   GATEWAY_SASL_USERNAME, GATEWAY_SASL_PASSWORD, and the same of SCORER_, TRAINER_, API_:
#                           the stages' accounts
#   KAFKA_LISTENER_SECURITY_PROTOCOL_MAP  every listener mapped to SASL_* gets the accounts
#   KAFKA_CONTROLLER_LISTENER_NAMES       …the broker's alone on these
#   SASL_CONFIG_DIR         where to write (default /mnt/shared/config)
set -euo pipefail

config_dir=${SASL_CONFIG_DIR:-/mnt/shared/config}
safe='^[A-Za-z0-9._-]+$'  # no quoting needed in JAAS or in a properties file
stages=(GATEWAY SCORER TRAINER API)

names=(BROKER_SASL_PASSWORD)
for stage in "${stages[@]}"; do
  names+=("${stage}_SASL_USERNAME" "${stage}_SASL_PASSWORD")
done
for name in "${names[@]}"; do
  if [[ ! ${!name:-} =~ $safe ]]; then
    echo "start.sh: set $name (letters, digits, - _ . only)" >&2
    exit 2
  fi
done
declare -A seen=([broker]=BROKER)
for stage in "${stages[@]}"; do
  user=${stage}_SASL_USERNAME
  if [[ -n ${seen[${!user}]:-} ]]; then
    echo "start.sh: $user must differ from the other accounts (${!user} is taken)" >&2
    exit 2
  fi
  seen[${!user}]=$stage
done

module=org.apache.kafka.common.security.plain.PlainLoginModule
# the broker logs in as "broker" (to other brokers); user_NAME="…" are the accounts it accepts
own="$module required username=\"broker\" password=\"$BROKER_SASL_PASSWORD\""
own+=" user_broker=\"$BROKER_SASL_PASSWORD\""
accounts=$own
for stage in "${stages[@]}"; do
  user=${stage}_SASL_USERNAME password=${stage}_SASL_PASSWORD
  accounts+=" user_${!user}=\"${!password}\""
done

umask 077
mkdir -p "$config_dir"
{
  echo "# written by start.sh at each start"
  IFS=, read -ra pairs <<< "${KAFKA_LISTENER_SECURITY_PROTOCOL_MAP:?}"
  IFS=, read -ra controllers <<< "${KAFKA_CONTROLLER_LISTENER_NAMES:-}"
  for pair in "${pairs[@]}"; do
    listener=${pair%%:*} protocol=${pair#*:}
    if [[ $protocol == SASL_* ]]; then
      if [[ " ${controllers[*]} " == *" $listener "* ]]; then
        echo "listener.name.${listener,,}.plain.sasl.jaas.config=$own;"
      else
        echo "listener.name.${listener,,}.plain.sasl.jaas.config=$accounts;"
      fi
    fi
  done
} > "$config_dir/server.properties"
cat > "$config_dir/probe.properties" <<PROBE
# the health check's login (kafka-broker-api-versions.sh --command-config)
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=$module required username="broker" password="$BROKER_SASL_PASSWORD";
PROBE

exec "$@"
