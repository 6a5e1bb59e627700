#!/usr/bin/env bash
# Every GPU check in one run on a machine with a CUDA GPU (run from the repository root; results
# go to $OUT, default /tmp/gpu_check): the `gpu` CTest label (CUDA device discovery) and the
# NCCL collective tests, with their logs in $OUT.
#
# Two ways to get the binaries:
#  - .gpu_bundle/bundle.tar.xz present (made here by scripts/gpu_bundle.sh, carried to the GPU
#    machine): run the packed binaries with the GPU machine's own NCCL and CUDA runtime. For a GPU
#    machine that cannot install packages.
#      device run: bash scripts/gpu_check.sh   carry: [.gpu_bundle]   (about 1 minute)
#  - otherwise: configure with CUDA on and build the tests there (needs scripts/setup.sh's packages).
#      bash scripts/gpu_check.sh               (about 5 minutes on 16 cores)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -1
} > "$OUT/machine.txt" 2>&1

# The first folder holding library $1 among the CUDA toolkit's and the nvidia-* Python wheels'.
find_lib() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
      $(python3 -c 'import glob, site; print(*[d for s in site.getsitepackages()
                                                  for d in glob.glob(s + "/nvidia/*/lib")])' \
        2>/dev/null); do
    if [ -e "$d/$1" ]; then echo "$d"; return 0; fi
  done
  return 1
}

if [ -f .gpu_bundle/bundle.tar.xz ]; then
  bin=/tmp/laminar_gpu_bundle
  rm -rf "$bin" && mkdir -p "$bin" && tar -C "$bin" -xJf .gpu_bundle/bundle.tar.xz
  nccl=$(find_lib libnccl.so.2) || { echo "no libnccl.so.2 on this machine"; exit 1; }
  cudart=$(find_lib libcudart.so.13) || { echo "no libcudart.so.13 on this machine"; exit 1; }
  export LD_LIBRARY_PATH="$bin/lib:$nccl:$cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "bundle; NCCL from $nccl, CUDA runtime from $cudart" >> "$OUT/machine.txt"
  run_test() { "$bin/bin/$1" "${@:2}"; }
else
  if ! command -v cmake >/dev/null || ! dpkg -s libdnnl-dev libgloo-dev libucx-dev >/dev/null 2>&1; then
    bash scripts/setup.sh --no-model > "$OUT/setup.log" 2>&1 ||
      { echo "setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
  fi
  cmake -S . -B build-gpu -DLAMINAR_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/configure.log" 2>&1 \
    || { tail -30 "$OUT/configure.log"; exit 1; }
  cmake --build build-gpu -j "$(nproc)" --target gpu_test trainer_test > "$OUT/build.log" 2>&1 \
    || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
  run_test() { "build-gpu/tests/$1" "${@:2}"; }
fi

status=0
run_test gpu_test > "$OUT/gpu_test.log" 2>&1 || status=1
run_test trainer_test --gtest_filter='*Nccl*:*Collective*' > "$OUT/collective.log" 2>&1 || status=1
cat "$OUT/machine.txt"
for f in gpu_test collective; do
  echo "== $f"
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Skipped|error" "$OUT/$f.log" | head -40
done
exit $status
