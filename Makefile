# fleetwatch — developer entry points. `make demo` and `make test` each do any set-up they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
CACHE  := .cache
JARS   := $(CACHE)/jvm
MVN    := mvn -B -q -s $(abspath deploy/jvm/settings.xml) -Dmaven.repo.local=$(abspath $(CACHE))/m2

.PHONY: help setup demo test test-unit test-integration lint format bench bench-report stack-up stack-down clean java-check mosquitto-check prometheus-check postgres-check

help:
	@echo "make setup   - virtualenv, JVM jars (Kafka broker, its JMX exporter, Spark Kafka connector), Mosquitto, Prometheus, PostgreSQL"
	@echo "make demo    - set up if needed, then run the whole pipeline with a simulated fleet"
	@echo "make test    - set up if needed, then unit + integration tests (starts the local stack)"
	@echo "make lint    - ruff, mypy and the import contracts (lint-imports)"
	@echo "make bench   - run every bench/*/*.py (each prints a JSON line of figures and writes bench/results/)"
	@echo "make bench-report - render README.md's figures table from bench/results/*.json"

setup: $(VENV)/.installed $(JARS)/kafka/.resolved $(JARS)/jmx-exporter/.resolved $(JARS)/spark-kafka/.resolved java-check mosquitto-check prometheus-check postgres-check

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

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fleetwatch needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

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

demo: setup
	$(VENV)/bin/fleetwatch demo

# Test temp dirs live in the run dir: pytest's shared /tmp/pytest-of-$USER is rotated by any
# other pytest session on the machine, which would delete a running test's files.
PYTEST := $(VENV)/bin/pytest --basetemp=.run/pytest

# The full suite prints its 25 slowest tests: it is held under 25 minutes.
test: setup
	$(PYTEST) --durations=25 tests

test-unit: setup
	$(PYTEST) tests/unit

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

# The README's current-figures table, from the results file each bench writes when it runs.
bench-report: $(VENV)/.installed
	$(PY) bench/report.py

stack-up: setup
	$(VENV)/bin/fleetwatch stack up

stack-down:
	$(VENV)/bin/fleetwatch stack down

clean:
	-$(VENV)/bin/fleetwatch stack down
	rm -rf .run
