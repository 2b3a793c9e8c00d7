#!/usr/bin/env bash
# Installs a server from Debian's packages when its binary is not already there, and stops the
# system-wide service the package may start: fleetwatch runs its own, with a config of its own.
#   deploy/install-debian.sh NAME BINARY PACKAGE...     (e.g. mosquitto /usr/sbin/mosquitto mosquitto)
set -euo pipefail
name=$1 binary=$2
shift 2
if command -v "$name" >/dev/null 2>&1 || [ -x "$binary" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "fleetwatch: $name is not installed and apt-get is unavailable; install $* and put $name on PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "fleetwatch: installing $name needs root (apt-get install $*)" >&2; exit 1
  fi
fi
echo "fleetwatch: installing $name from Debian packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
if command -v service >/dev/null 2>&1; then $sudo service "$name" stop >/dev/null 2>&1 || true; fi
