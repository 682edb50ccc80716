#!/usr/bin/env bash
# Installs the Debian packages trainplan needs, skipping those already present (Debian 12, run as root).
set -euo pipefail
pkgs=(cmake ninja-build g++ make nlohmann-json3-dev libboost-graph-dev libgtest-dev libgmock-dev libbenchmark-dev
      libeigen3-dev openmpi-bin libopenmpi-dev libcli11-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
