# fleetwatch — developer entry points. `make demo` and `make test` each do any set-up they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
CACHE  := .cache
JARS   := $(CACHE)/jvm
MVN    := mvn -B -q -s $(abspath deploy/jvm/settings.xml) -Dmaven.repo.local=$(abspath $(CACHE))/m2

.PHONY: help setup lock demo test test-unit test-integration lint format bench bench-report stack-up stack-down clean java-check mosquitto-check prometheus-check postgres-check

help:
	@echo "make setup   - virtualenv, JVM jars (Kafka broker, its JMX exporter, Spark Kafka connector, S3A), Mosquitto, Prometheus, PostgreSQL"
	@echo "make lock    - re-resolve requirements/*.lock after a change to pyproject.toml's dependencies"
	@echo "make demo    - set up if needed, then run the whole pipeline with a simulated fleet"
	@echo "make test    - set up if needed, then unit + integration tests (starts the local stack)"
	@echo "make lint    - ruff, mypy and the import contracts (lint-imports)"
	@echo "make bench   - run every bench/*/*.py (each prints a JSON line of figures and writes bench/results/)"
	@echo "make bench-report - render README.md's figures table from bench/results/*.json"

setup: $(VENV)/.installed $(JARS)/kafka/.resolved $(JARS)/jmx-exporter/.resolved $(JARS)/spark-kafka/.resolved $(JARS)/s3a/.resolved java-check mosquitto-check prometheus-check postgres-check

java-check:
	@deploy/check-java.sh

mosquitto-check:
	@deploy/install-debian.sh mosquitto /usr/sbin/mosquitto mosquitto mosquitto-clients

# Prometheus for `fleetwatch stack up --with-prometheus` (the demo, the dashboards' test): the
# binary of Debian's package, run by fleetwatch with a config and data dir of its own; its
# promtool runs the alerting rules' unit tests (tests/unit/test_alert_rules.py).
prometheus-check:
	@deploy/install-debian.sh prometheus /usr/bin/prometheus prometheus

# PostgreSQL for the API store's tests: installed here; the tests start a private cluster
# (deploy/install-postgres.sh start) unless FLEETWATCH_TEST_POSTGRES_URL names a server.
postgres-check:
	@deploy/install-postgres.sh install

# Reproducible installs. requirements/dev.lock pins every package the virtualenv holds, with its
# hashes; `uv pip sync` makes the virtualenv exactly that (removing anything else but pip), then
# fleetwatch goes in editable with --no-deps. requirements/runtime.lock is the same pins less the
# dev extra, for the image. uv itself comes pinned and hash-checked from requirements/tools.lock
# into a virtualenv of its own under .cache/. tests/unit/test_locks.py fails when pyproject.toml
# and the locks disagree: after changing its dependencies, `make lock` (keeps every pin it can;
# `make lock LOCK_ARGS=--upgrade` takes the newest versions the ranges allow).
UV_VERSION := 0.13.8
UV_HOME    := $(CACHE)/uv
UV         := $(UV_HOME)/bin/uv
LOCK_FLAGS := --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --generate-hashes \
              --custom-compile-command 'make lock' --quiet

$(UV_HOME)/.installed: requirements/tools.lock
	@test -x $(UV_HOME)/bin/python || $(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/python -m pip install -q --require-hashes -r requirements/tools.lock
	@touch $@

$(VENV)/.installed: requirements/dev.lock pyproject.toml $(UV_HOME)/.installed
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fleetwatch needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(UV) pip sync --quiet --python $(PY) --require-hashes requirements/dev.lock
	$(UV) pip install --quiet --python $(PY) --no-deps -e .
	@touch $@

lock: $(UV_HOME)/.installed
	echo 'uv==$(UV_VERSION)' | $(UV) pip compile - $(LOCK_FLAGS) $(LOCK_ARGS) -o requirements/tools.lock
	$(UV) pip compile pyproject.toml --extra dev $(LOCK_FLAGS) $(LOCK_ARGS) -o requirements/dev.lock
	$(UV) pip compile pyproject.toml $(LOCK_FLAGS) $(LOCK_ARGS) -c requirements/dev.lock \
	    -o requirements/runtime.lock

$(JARS)/kafka/.resolved: deploy/jvm/kafka/pom.xml | java-check
	@rm -rf $(JARS)/kafka && mkdir -p $(JARS)/kafka
	cd deploy/jvm/kafka && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS))/kafka
	@touch $@

# The Prometheus JMX exporter agent `fleetwatch stack` attaches to the broker (kafka.metrics_port).
$(JARS)/jmx-exporter/.resolved: deploy/jvm/jmx-exporter/pom.xml | java-check
	@rm -rf $(JARS)/jmx-exporter && mkdir -p $(JARS)/jmx-exporter
	cd deploy/jvm/jmx-exporter && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS))/jmx-exporter
	@touch $@

# The connector must match the installed pyspark exactly: the version is read from the venv.
$(JARS)/spark-kafka/.resolved: deploy/jvm/spark-kafka/pom.xml $(VENV)/.installed | java-check
	@rm -rf $(JARS)/spark-kafka && mkdir -p $(JARS)/spark-kafka
	cd deploy/jvm/spark-kafka && $(MVN) dependency:copy-dependencies -DincludeScope=runtime \
	    -Dspark.version=$$($(abspath $(PY)) -c 'import pyspark; print(pyspark.__version__)') \
	    -DoutputDirectory=$(abspath $(JARS))/spark-kafka
	@touch $@

# Hadoop's S3A connector, for checkpoints on s3a://: hadoop-aws at the Hadoop version of the
# client jars in the installed pyspark wheel, read from the venv.
HADOOP_VERSION = $(abspath $(PY)) -c 'import pathlib, pyspark; \
    jar = next(pathlib.Path(pyspark.__file__).parent.glob("jars/hadoop-client-api-*.jar")); \
    print(jar.stem.rsplit("-", 1)[1])'

$(JARS)/s3a/.resolved: deploy/jvm/s3a/pom.xml $(VENV)/.installed | java-check
	@rm -rf $(JARS)/s3a && mkdir -p $(JARS)/s3a
	cd deploy/jvm/s3a && $(MVN) dependency:copy-dependencies -DincludeScope=runtime \
	    -Dhadoop.version=$$($(HADOOP_VERSION)) -DoutputDirectory=$(abspath $(JARS))/s3a
	@touch $@

demo: setup
	$(VENV)/bin/fleetwatch demo

# Test temp dirs live in the run dir: pytest's shared /tmp/pytest-of-$USER is rotated by any
# other pytest session on the machine, which would delete a running test's files.
PYTEST := mkdir -p .run && $(VENV)/bin/pytest --basetemp=.run/pytest

# The full suite prints its 25 slowest tests: it is held under 25 minutes. The unit tests run on
# two workers (pytest-xdist; each test has its own temp dir and ports); the Spark and integration
# tests after them, one at a time: they share the stack's default ports, and Spark takes both
# cores. Both parts run whatever the first gave; the target fails if either failed. The Spark
# JVMs' class archive (tests/jvm.py; a Spark run of about a minute where there is none yet, as
# on a clean clone) is made beside the unit tests, not in the first Spark test's set-up.
UNIT_WORKERS ?= 2

test: setup
	@status=0; \
	$(PY) -m tests.jvm & archive=$$!; \
	$(PYTEST) -n $(UNIT_WORKERS) --durations=25 tests/unit || status=$$?; \
	wait $$archive; \
	$(PYTEST) --durations=25 --ignore=tests/unit tests || status=$$?; \
	exit $$status

test-unit: setup
	$(PYTEST) -n $(UNIT_WORKERS) tests/unit

test-integration: setup
	$(PYTEST) tests/integration

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy fleetwatch bench tests
	$(VENV)/bin/lint-imports --no-logo --cache-dir $(CACHE)/import-linter

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: setup
	@set -e; for b in bench/*/[!_]*.py; do echo "== $$b"; $(PY) $$b; done

# The README's current-figures table and docs/budget.md's curve, from the results file each
# bench writes when it runs.
bench-report: $(VENV)/.installed
	$(PY) bench/report.py
	$(PY) bench/budget_doc.py

stack-up: setup
	$(VENV)/bin/fleetwatch stack up

stack-down:
	$(VENV)/bin/fleetwatch stack down

clean:
	-$(VENV)/bin/fleetwatch stack down
	rm -rf .run
