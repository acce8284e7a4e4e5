#!/usr/bin/env bash
# Installs the Debian packages Ember needs to build, test and run (compiler, CMake, Open MPI, parallel HDF5, Boost,
# OpenBLAS, oneDNN, nlohmann-json, PCRE2, zlib, zstd, libzip, simdjson, GoogleTest, Python with numpy/h5py/torch,
# venv and pip, clang-format for the format check, Slurm for the job-script tests, iproute2 and ping for the emulated
# cluster). Idempotent: quiet and does nothing when all are present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev
  libboost-program-options-dev libopenblas-dev nlohmann-json3-dev
  # tokenizers and corpus formats: PCRE2 (pre-tokenization), zlib (.gz), zstd (.zst), libzip (.zip)
  libpcre2-dev zlib1g-dev libzstd-dev libzip-dev
  # JSONL documents (simdjson On-Demand)
  libsimdjson-dev
  # int8 products on the CPU (oneDNN). Its CMake package looks for the OpenCL loader and headers, which Debian lists
  # only as recommended (not installed with --no-install-recommends): named here so a bare machine configures.
  libdnnl-dev ocl-icd-opencl-dev
  # ember serve: the HTTP server (Boost.Beast and Boost.Asio, header-only)
  libboost-dev
  libgtest-dev googletest
  python3 python3-numpy python3-h5py python3-venv python3-pip
  # scripts/plot_metrics.py (the demo's loss plot) and the plot of scripts/bench/async.sh
  python3-matplotlib
  # CPU PyTorch for transformers in .venv (scripts/python_env.sh): the Hugging Face interop tests and benchmarks
  python3-torch
  procps
  # /usr/bin/time -v: peak memory of a prep in tests/e2e/prep_streaming.sh
  time
  # scripts/check-format.sh: Debian 12's clang-format is version 14, the one the tree is formatted with.
  clang-format
  # Slurm for tests/e2e/slurm_requeue.sh, which starts its own single-node slurmctld + slurmd: the daemons, the
  # clients (sbatch, srun, scontrol, ...) and the plugins, among them mpi_pmix.so that `srun --mpi=pmix` needs to
  # start Open MPI ranks.
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins
  # scripts/cluster/: network namespaces, veth links and tc (iproute2), per-host names (util-linux's unshare), the
  # reachability check (ping)
  iproute2 util-linux iputils-ping
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "error: setup: missing packages ${missing[*]}, and this script is neither root nor able to use sudo" >&2
  echo "hint: as root, run: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "setup: installing missing packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
