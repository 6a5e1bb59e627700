#!/usr/bin/env bash
# Packs the CUDA-enabled GPU test binaries built on this machine, with the shared libraries they
# need that a bare GPU machine lacks, into .gpu_bundle/bundle.tar.xz (ignored by git), for
# `scripts/gpu_check.sh` on a GPU machine that cannot install packages (the `device` tool's:
# carry .gpu_bundle). NCCL, the CUDA runtime and the driver are not packed: the GPU machine has its
# own (CUDA toolkit, or PyTorch's nvidia-* wheels), found by gpu_check.sh.
#   scripts/gpu_bundle.sh            # BUILD_DIR=build by default; builds gpu_test and trainer_test
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
TESTS=(gpu_test trainer_test)

if ! grep -q '^LAMINAR_NCCL_LIBRARY:FILEPATH=/' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  echo "gpu_bundle: $BUILD_DIR is not configured with CUDA and NCCL (cmake -DLAMINAR_CUDA=ON)" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TESTS[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${TESTS[@]}"; do
  objcopy --strip-debug "$BUILD_DIR/tests/$t" "$stage/bin/$t"
done
# Every library the tests load, except the C library's own, the CUDA runtime, NCCL and the driver.
ldd "${TESTS[@]/#/$BUILD_DIR/tests/}" | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so|/lib(cuda|cudart|nccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
mkdir -p .gpu_bundle
tar -C "$stage" -cJf .gpu_bundle/bundle.tar.xz bin lib
echo "gpu_bundle: .gpu_bundle/bundle.tar.xz ($(du -h .gpu_bundle/bundle.tar.xz | cut -f1)):" \
  "$(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries"
