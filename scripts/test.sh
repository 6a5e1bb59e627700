#!/usr/bin/env bash
# Configures, builds and runs the test suite (CTest labels unit, integration, gpu, slow; gpu tests
# skip without a device). --fast leaves out the tests labelled slow (each over ~5 s; the rest run
# in about a minute after the build). Other arguments go to ctest, e.g. scripts/test.sh -L unit.
# The pinned test data (scripts/fetch_test_data.sh) is fetched first when missing. The run ends
# with the skipped tests counted by reason ("N tests skipped: outside goldens not present").
# Environment: BUILD_DIR (default build), LAMINAR_WERROR (default ON), JOBS (default nproc),
# LAMINAR_ONLY_GOLDEN_SKIPS=1 (fail when a test skipped for any other reason than an outside
# golden, a missing GPU or benchmark peer), LAMINAR_SHARED_DATA (where the outside goldens are).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
args=()
for a in "$@"; do
  if [ "$a" = "--fast" ]; then args+=(-LE slow); else args+=("$a"); fi
done
# Let ccache hit across clones in different folders (CI builds a fresh clone each time).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAMINAR_WERROR="${LAMINAR_WERROR:-ON}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
scripts/fetch_test_data.sh ||
  echo "[test] the test data could not be fetched; the tests that read it fail naming the file" >&2
status=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 300 "${args[@]}" || status=$?
python3 scripts/skip_report.py "$BUILD_DIR" ${LAMINAR_ONLY_GOLDEN_SKIPS:+--only-goldens} || status=1
exit "$status"
