#!/usr/bin/env bash
# The command of the pods Spark starts on Kubernetes for fleetwatch's scorer and trainer
# (`spark-submit --master k8s://…`, see deploy/k8s/README.md). They run the fleetwatch image,
# whose own entrypoint is the `fleetwatch` command; the pod templates in deploy/k8s/spark/ set
# this script as their command instead. Spark gives the role as the first argument — `driver`
# followed by spark-submit's arguments, or `executor` — and the rest in SPARK_* variables.
set -euo pipefail

: "${SPARK_HOME:?the image sets SPARK_HOME to the installed pyspark}"
: "${JAVA_HOME:?the image sets JAVA_HOME}"

# Spark's own jars, after spark.executor.extraClassPath (SPARK_CLASSPATH: the Kafka connector
# in the image) and before them the configuration Spark mounts (SPARK_CONF_DIR).
classpath="${SPARK_HOME}/jars/*"
if [[ -n "${SPARK_CLASSPATH:-}" ]]; then
  classpath="${SPARK_CLASSPATH}:${classpath}"
fi
if [[ -n "${SPARK_CONF_DIR:-}" ]]; then
  classpath="${SPARK_CONF_DIR}:${classpath}"
fi

case "${1:-}" in
  driver)
    shift
    # The driver pod runs the application in client mode within itself.
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # JVM options arrive numbered (SPARK_JAVA_OPT_0, _1, …), in that order.
    java_opts=()
    while IFS= read -r option; do
      java_opts+=("$option")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${classpath}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
