#!/usr/bin/env bash
# Installs the Debian packages Maru needs to build, test and benchmark.
# Idempotent: installs only what is missing. Run as root.
set -euo pipefail

packages=(
  build-essential g++ meson ninja-build pkg-config clang-format git
  libfuse3-dev fuse3 liburing-dev
  libnuma-dev libdaxctl-dev
  librocksdb-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libgtest-dev
  libxxhash-dev libucx-dev libssl-dev
  fio tmux man-db groff-base iproute2 rsync attr jq
  redis-server gnuplot-nox
  etcd-server etcd-client
  nlohmann-json3-dev libsystemd-dev
  python3 python3-dev python3-pybind11 python3-numpy python3-torch python3-pytest
  python3-mesonpy python3-pip python3-venv patchelf
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: must run as root to install packages" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
