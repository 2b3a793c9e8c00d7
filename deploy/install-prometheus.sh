#!/usr/bin/env bash
# Installs Prometheus from Debian's packages when it is not already there. `fleetwatch stack up
# --with-prometheus` runs the binary itself, with a config and data dir under the run dir.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "fleetwatch: Prometheus is not installed and apt-get is unavailable; install prometheus 2.x and put it on PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "fleetwatch: installing Prometheus needs root (apt-get install prometheus)" >&2; exit 1
  fi
fi
echo "fleetwatch: installing prometheus from Debian packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package may start a system-wide server on :9090; fleetwatch runs its own.
if command -v service >/dev/null 2>&1; then $sudo service prometheus stop >/dev/null 2>&1 || true; fi
