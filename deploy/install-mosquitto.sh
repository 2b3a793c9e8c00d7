#!/usr/bin/env bash
# Installs the Mosquitto broker from Debian's packages when it is not already there.
set -euo pipefail
if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "fleetwatch: Mosquitto is not installed and apt-get is unavailable; install mosquitto 2.x and put it on PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "fleetwatch: installing Mosquitto needs root (apt-get install mosquitto)" >&2; exit 1
  fi
fi
echo "fleetwatch: installing mosquitto from Debian packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends mosquitto mosquitto-clients >/dev/null
# The package may start a system-wide broker on :1883; fleetwatch runs its own on loopback.
if command -v service >/dev/null 2>&1; then $sudo service mosquitto stop >/dev/null 2>&1 || true; fi
