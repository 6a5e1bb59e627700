#!/usr/bin/env bash
# Builds every unit test binary (core: threads, ZeroMQ/UCX transports, processes; protobuf; model
# files and tokenizers; kernels; engine; trainer; speculation; rollout engine and manager; relay;
# rewards; security: every role's server under CURVE) and the RL loop's tests (every role as
# threads of one process, and as `laminar` processes in each mode, with faults) with clang under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/) and ThreadSanitizer (build-tsan/), and
# runs them. Every process writes its reports to <build>/sanitizer_reports/ (the loop's tests start
# `laminar` roles, whose reports would otherwise stay in their logs); any report, or a failed test,
# fails the run (halt_on_error). CI runs it (.ci/run).
#
#   scripts/sanitize.sh                   # both
#   scripts/sanitize.sh thread            # one: address or thread
#   JOBS=2 scripts/sanitize.sh address
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
KINDS=("$@")
[[ ${#KINDS[@]} -gt 0 ]] || KINDS=(address thread)
TESTS=(core_test proto_test model_test model_tokenizer_test kernels_test engine_test trainer_test
       rollout_speculation_test rollout_engine_test rollout_worker_test rollout_manager_test
       relay_test reward_test security_test cli_test)
# cli_test holds every verb's end-to-end tests; the loop's are the ones run here.
LOOP_TESTS="*RlLoopTest.*:RlLoopFaultTest.*:RlThreadsTest.*:*MaxStalenessTest.*:ManagerServerTest.*"
LONG_RUNS="QuantizedRolloutTest.SmolLM2FormatsAgainstF32AndTheF32Trainer"
LONG_RUNS+=":SpeculativeTinyModelTest.SampledTokensHaveTheNonSpeculativeDistribution"
# Let ccache hit across clones in different folders, as scripts/test.sh does.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

status=0
for kind in "${KINDS[@]}"; do
  case "$kind" in
    address) dir=build-asan; sanitize="address,undefined" ;;
    thread) dir=build-tsan; sanitize=thread ;;
    *) echo "sanitize: unknown kind '$kind' (address or thread)" >&2; exit 2 ;;
  esac
  if [[ ! -f "$dir/CMakeCache.txt" ]]; then
    CC=clang CXX=clang++ cmake -S . -B "$dir" -DLAMINAR_SANITIZE="$sanitize" -DLAMINAR_CUDA=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  fi
  start=$(date +%s)
  # The loop's tests run the sanitized `laminar` and the synthetic model it makes.
  nice cmake --build "$dir" -j"$JOBS" --target "${TESTS[@]}" laminar tiny_model
  echo "[sanitize] $kind: built in $(( $(date +%s) - start )) s"
  reports="$PWD/$dir/sanitizer_reports"
  rm -rf "$reports"
  mkdir -p "$reports"
  # The C reward plug-ins run in a sandbox whose address-space limit leaves no room for a
  # sanitizer's shadow memory (their workers fail to start), so CRewardTest runs in the plain build
  # only. UCX is not instrumented: its memory hooks crash ThreadSanitizer at thread exit, and its
  # TCP connection manager trips its own assertions under the sanitizer's timing (UcxTransportTest
  # runs in the plain build).
  # Two long statistical runs stay in the plain build too (1.5-3 minutes each here under a
  # sanitizer): SmolLM2 in every weight format against the f32 trainer, and thousands of
  # speculatively sampled tokens against the plain distribution; the faster tests of their suites
  # run the same code (QuantGemmTest, LlamaModelTest, SpeculativeEngineTest, VerifyTreeTest, the
  # export and weight swap mid-speculation).
  filter="-CRewardTest.*:$LONG_RUNS"
  if [[ "$kind" == thread ]]; then
    export UCX_MEM_EVENTS=no
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions='$PWD/tests/tsan.supp' log_path='$reports/tsan'"
    filter="$filter:UcxTransportTest.*"
  else
    export ASAN_OPTIONS="halt_on_error=1 detect_leaks=0 abort_on_error=0 log_path='$reports/asan'"
    export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 log_path='$reports/ubsan'"
  fi
  for t in "${TESTS[@]}"; do
    start=$(date +%s)
    this_filter="$filter"
    if [[ "$t" == cli_test ]]; then this_filter="$LOOP_TESTS"; fi
    if (cd "$dir/tests" && timeout -s KILL 900 "./$t" --gtest_filter="$this_filter" > "../$t.log" 2>&1); then
      echo "[sanitize] $kind: $t passed ($(grep -a -o '\[  PASSED  \] [0-9]* tests' "$dir/$t.log"), $(( $(date +%s) - start )) s)"
    else
      echo "!! [sanitize] $kind: $t failed; the end of $dir/$t.log:" >&2
      tail -60 "$dir/$t.log" >&2
      status=1
    fi
  done
  if [[ -n "$(ls -A "$reports")" ]]; then
    for f in "$reports"/*; do
      echo "!! [sanitize] $kind: a report, $f:" >&2
      head -80 "$f" >&2
    done
    status=1
  else
    echo "[sanitize] $kind: no reports"
  fi
done
exit $status
