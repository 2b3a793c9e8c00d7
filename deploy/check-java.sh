#!/usr/bin/env bash
# Kafka 4.x and Spark 4.x need Java 17 or newer.
set -euo pipefail
if ! command -v java >/dev/null 2>&1; then
  echo "fleetwatch: Java 17+ is required and 'java' is not on PATH (Debian: apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
major=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
if [ -z "$major" ] || [ "${major%%.*}" -lt 17 ]; then
  echo "fleetwatch: Java 17+ is required, found '${major:-unknown}' at $(command -v java)" >&2
  exit 1
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "fleetwatch: Maven ('mvn') is required to resolve the Kafka and Spark jars (Debian: apt-get install maven)" >&2
  exit 1
fi
