#!/usr/bin/env bash
# Every GPU check in one run, for a session lent a GPU machine (the `device` tool runs it in the
# repository root with $OUT for results): configure with CUDA on, build the test binaries, then run
# the `gpu` CTest label and the NCCL collective test, and keep the logs in $OUT.
#   device run: bash scripts/gpu_check.sh      (timeout ~500 s; about 5 minutes on 16 cores)
set -uo pipefail
OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nvcc --version | tail -1
} > "$OUT/machine.txt" 2>&1
if ! command -v cmake >/dev/null || ! dpkg -s libdnnl-dev libgloo-dev libucx-dev >/dev/null 2>&1; then
  bash scripts/setup.sh --no-model > "$OUT/setup.log" 2>&1 || { echo "setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
fi
cmake -S . -B build-gpu -DLAMINAR_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target gpu_test trainer_test > "$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
status=0
ctest --test-dir build-gpu -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1 || status=1
build-gpu/tests/trainer_test --gtest_filter='*Nccl*' > "$OUT/nccl.log" 2>&1 || status=1
tail -3 "$OUT/ctest_gpu.log"
grep -E "OK|FAILED|SKIPPED|PASSED" "$OUT/nccl.log"
exit $status
