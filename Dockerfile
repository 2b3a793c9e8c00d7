# syntax=docker/dockerfile:1
# One image for every fleetwatch stage: its entrypoint is the `fleetwatch` command, so
#   docker run fleetwatch:0.1.0 gateway | score | train | api | topics create | sim run | …
# Built from the repository root: `docker build -t fleetwatch:0.1.0 .` (deploy/compose.yaml
# builds it too). Three stages: the Python package in a virtualenv (its dependencies as
# requirements/runtime.lock pins them), the JVM jars from Maven Central (as `make setup` resolves
# them: the Kafka and S3A connectors for Spark, the JMX exporter), and the runtime with Python
# 3.11 and a JRE 17.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17

# -- 1. fleetwatch and its dependencies, in the virtualenv path the runtime keeps -----------
FROM ${PYTHON_IMAGE} AS python-build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/fleetwatch/venv
WORKDIR /src
# Every dependency at the version and hash requirements/runtime.lock pins (`make lock` writes it
# beside the dev lock `make setup` installs), then fleetwatch itself with --no-deps; `pip check`
# fails the build if the lock left a requirement out.
COPY requirements/runtime.lock ./requirements/
RUN /opt/fleetwatch/venv/bin/pip install --require-hashes --no-deps -r requirements/runtime.lock
COPY pyproject.toml README.md ./
COPY fleetwatch ./fleetwatch
# The Spark Kafka connector must match pyspark exactly, and Hadoop's S3A connector the Hadoop
# client jars of the pyspark wheel: both versions are read from the package installed here, as
# the Makefile reads them from the checkout's virtualenv.
RUN /opt/fleetwatch/venv/bin/pip install . --no-deps \
 && /opt/fleetwatch/venv/bin/pip check \
 && /opt/fleetwatch/venv/bin/python -c 'import pyspark; print(pyspark.__version__)' \
      > /opt/fleetwatch/spark.version \
 && /opt/fleetwatch/venv/bin/python -c 'import pathlib, pyspark; \
      jar = next(pathlib.Path(pyspark.__file__).parent.glob("jars/hadoop-client-api-*.jar")); \
      print(jar.stem.rsplit("-", 1)[1])' > /opt/fleetwatch/hadoop.version

# -- 2. the JVM jars: Spark's Kafka connector (+ the local file system), Hadoop's S3A
#       connector (checkpoints on s3a://), the JMX exporter ------------------------------------
FROM ${MAVEN_IMAGE} AS jars
WORKDIR /build
COPY deploy/jvm ./jvm
COPY --from=python-build /opt/fleetwatch/spark.version ./spark.version
COPY --from=python-build /opt/fleetwatch/hadoop.version ./hadoop.version
RUN mvn -B -q -s /build/jvm/settings.xml -Dmaven.repo.local=/build/m2 \
      -f jvm/spark-kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
      -Dspark.version="$(cat /build/spark.version)" \
      -DoutputDirectory=/jars/spark-kafka \
 && test -f /jars/spark-kafka/spark-sql-kafka-0-10_2.13-"$(cat /build/spark.version)".jar
RUN mvn -B -q -s /build/jvm/settings.xml -Dmaven.repo.local=/build/m2 \
      -f jvm/s3a/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
      -Dhadoop.version="$(cat /build/hadoop.version)" \
      -DoutputDirectory=/jars/s3a \
 && test -f /jars/s3a/hadoop-aws-"$(cat /build/hadoop.version)".jar
RUN mvn -B -q -s /build/jvm/settings.xml -Dmaven.repo.local=/build/m2 \
      -f jvm/jmx-exporter/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
      -Dmdep.stripVersion=true -DoutputDirectory=/jars/jmx-exporter

# -- 3. the runtime ------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="fleetwatch" \
      org.opencontainers.image.description="Streaming anomaly detection for IoT device fleets" \
      org.opencontainers.image.licenses="Apache-2.0"
# A JRE 17 for Spark; tini as PID 1 reaps Spark's Python workers and passes SIGTERM on to the
# stage, which stops cleanly by itself. (The man directory: the JRE's post-install script
# links its manual pages there, and slim images have none.)
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
RUN groupadd --system --gid 10001 fleetwatch \
 && useradd --system --uid 10001 --gid fleetwatch --home-dir /var/lib/fleetwatch \
      --shell /usr/sbin/nologin fleetwatch \
 && mkdir -p /var/lib/fleetwatch /opt/fleetwatch/export \
 && chown fleetwatch:fleetwatch /var/lib/fleetwatch /opt/fleetwatch/export
COPY --from=python-build /opt/fleetwatch/venv /opt/fleetwatch/venv
COPY --from=jars /jars/spark-kafka /opt/fleetwatch/jars/spark-kafka
COPY --from=jars /jars/s3a /opt/fleetwatch/jars/s3a
COPY --from=jars /jars/jmx-exporter /opt/fleetwatch/jars/jmx-exporter
COPY --chmod=0755 deploy/spark/entrypoint.sh /opt/fleetwatch/bin/spark-entrypoint
# FLEETWATCH_SPARK__JARS_DIR / FLEETWATCH_OBJECT_STORE__JARS_DIR: where the code looks for the
# Kafka and S3A connectors (Settings.spark_jars_dir, .s3a_jars_dir; outside a checkout their
# defaults would be under the working directory's .cache/jvm/).
# SPARK_HOME: the installed pyspark, for spark-submit and the Spark-on-Kubernetes pods.
ENV PATH=/opt/fleetwatch/venv/bin:$PATH \
    JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/fleetwatch/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/fleetwatch/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    FLEETWATCH_RUN_DIR=/var/lib/fleetwatch \
    FLEETWATCH_SPARK__JARS_DIR=/opt/fleetwatch/jars/spark-kafka \
    FLEETWATCH_OBJECT_STORE__JARS_DIR=/opt/fleetwatch/jars/s3a \
    FLEETWATCH_API__HOST=0.0.0.0
USER 10001:10001
WORKDIR /var/lib/fleetwatch
# The API's port; the stages' metrics ports (gateway, scorer, trainer).
EXPOSE 8000 9101 9102 9103
ENTRYPOINT ["/usr/bin/tini", "--", "fleetwatch"]
CMD ["--help"]
