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
# cuDNN's fused attention for the CUDA backend (exec/kernels/cuda/cudnn_sdpa.cpp) compiles against the header-only
# cudnn-frontend, which NVIDIA ships as the PyPI package nvidia-cudnn-frontend: where the CUDA toolkit is installed
# (nvcc) and the headers are not yet unpacked, download that wheel (no install) and unpack its include/ folder into
# the folder CMake looks in (TRAINPLAN_CUDNN_FRONTEND_DIR). Without it the build skips libtrainplan_cudnn.so and the
# backend runs its own flash kernels; a failed download is a note, not an error.
fe_version=1.32.0
fe_dir=${TRAINPLAN_DEPS_DIR:-$HOME/.cache/trainplan}/cudnn-frontend-$fe_version
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } && [ ! -f "$fe_dir/include/cudnn_frontend.h" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$fe_version" \
       >"$tmp/log" 2>&1 &&
     python3 -c 'import sys, zipfile, glob
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$tmp" "$fe_dir"; then
    echo "unpacked cudnn-frontend $fe_version headers into $fe_dir"
  else
    echo "note: could not fetch nvidia-cudnn-frontend $fe_version (cuDNN attention will not be built): $(tail -1 "$tmp/log")"
  fi
  rm -rf "$tmp"
fi
