#!/usr/bin/env bash
# Builds Podium's fuzz targets as cargo-fuzz does (libFuzzer, SanitizerCoverage and
# AddressSanitizer, `--cfg fuzzing`) and runs each for a bounded time, on the stable toolchain:
# RUSTC_BOOTSTRAP=1 lets stable rustc take -Zsanitizer, so neither nightly nor cargo-fuzz has
# to be installed (a fresh machine has neither). The Lua interpreter's C is compiled without
# instrumentation (no clang here); its crashes still stop the run.
#
#   fuzz/run.sh [--seconds N] [target ...]     default: 40 s for each of the four targets
#
# Each target starts from its seeds (fuzz/seeds/<target>, kept in the repository) plus its
# local corpus (fuzz/corpus/<target>, git-ignored, grown by every run). A crash leaves its
# input in fuzz/artifacts/<target>/ and the script exits non-zero; the input belongs in a
# regression test (tests/lua_hardening.rs for scripts) and in the seeds. For a long run:
#   fuzz/run.sh --seconds 600 lua_script
set -euo pipefail
cd "$(dirname "$0")"
seconds=40
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(resp_parser restore_payload dispatch_args lua_script)
triple=$(rustc -vV | sed -n 's/^host: //p')
flags=(
  -Cpasses=sancov-module
  -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
  -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares
  -Cllvm-args=-sanitizer-coverage-stack-depth
  -Zsanitizer=address
  -Cdebug-assertions
  -Coverflow-checks
  -Cforce-frame-pointers
  --cfg fuzzing
)
# --target keeps build scripts (and the Lua build) out of the instrumented flags.
RUSTC_BOOTSTRAP=1 RUSTFLAGS="${flags[*]}" \
  cargo build --release --target "$triple" "${targets[@]/#/--bin=}"
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  extra=()
  [ "$t" = lua_script ] && extra+=(-dict=lua.dict)
  seeds=()
  [ -d "seeds/$t" ] && seeds+=("seeds/$t")
  echo "fuzz: $t for ${seconds}s"
  if ! "target/$triple/release/$t" "corpus/$t" "${seeds[@]}" "${extra[@]}" \
      -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 \
      -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"artifacts/$t.log" 2>&1; then
    echo "fuzz: $t FAILED (log: fuzz/artifacts/$t.log)"
    tail -40 "artifacts/$t.log"
    status=1
  else
    grep -E "^(stat::number_of_executed_units|Done)" "artifacts/$t.log" | sed "s/^/fuzz: $t: /"
  fi
done
exit $status
