#!/usr/bin/env bash
# Builds and runs the cargo-fuzz targets (docs/fuzzing.md) on the stable toolchain.
#
#   scripts/fuzz.sh [--seconds N] [--target T]... [--sanitizer none|address] [--no-build]
#
# Targets: frame_decoder relay_line relay_session hub_session config_parse roster_parse
# mcp_session hook_input (default: all, one after another, never in parallel).
#
# Each target runs for N seconds (default 60) from its committed seeds (fuzz/seeds/<target>/)
# plus the working corpus (fuzz/corpus/<target>/, git-ignored, grown by the run). The build
# uses cargo-fuzz with RUSTC_BOOTSTRAP=1, which lets stable rustc take the nightly flags
# cargo-fuzz passes, and `--sanitizer none` by default: every target exercises safe Rust only
# (the crate's `unsafe` is in the server's signal and socket code, which no target reaches),
# so AddressSanitizer finds nothing more there and costs about 4x the executions per second;
# debug assertions and overflow checks stay on (cargo-fuzz's default).
#
# Prints one line per target from libFuzzer's final stats: executions, coverage (cov: edges,
# ft: features), corpus size, seconds. A crash, a timeout (an input that runs over 10 s) or an
# out-of-memory (over 2 GiB) leaves its input in fuzz/artifacts/<target>/ and makes the script
# exit 1 after the other targets ran; reproduce with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none <target> fuzz/artifacts/<target>/<file>
# and minimise with `cargo fuzz tmin` (same flags).
#
# Exits 77 (skipped, with a note) when cargo-fuzz is missing and cannot be installed, when its
# crates cannot be fetched (no network and no cache), or when the toolchain cannot build a
# libFuzzer target here (no C++ compiler, a rustc without the coverage passes): a missing
# network or toolchain never fails CI. A target that fails to build once the toolchain is known
# to work is a failure (exit 1).
set -uo pipefail
cd "$(dirname "$0")/.."

all_targets=(frame_decoder relay_line relay_session hub_session config_parse roster_parse mcp_session hook_input client_line stored_text)
seconds=60
sanitizer=none
build=1
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --target) targets+=("${2:?--target needs a name}"); shift 2 ;;
    --sanitizer) sanitizer=${2:?--sanitizer needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $seconds in ''|*[!0-9]*) echo "fuzz.sh: --seconds must be a whole number" >&2; exit 2 ;; esac
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in *" $t "*) ;; *) echo "fuzz.sh: unknown target $t (known: ${all_targets[*]})" >&2; exit 2 ;; esac
done

skip() { echo "note: fuzzing skipped: $*"; exit 77; }
export RUSTC_BOOTSTRAP=1

# 1. cargo-fuzz itself.
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  timeout 900 cargo install cargo-fuzz --locked >/dev/null 2>&1 \
    || skip "cargo-fuzz is not installed and could not be installed (no network?)"
  cargo fuzz --version >/dev/null 2>&1 || skip "cargo-fuzz installed but does not run"
fi

# 2. The fuzz crate's dependencies (libfuzzer-sys and its build tools), exactly as locked, for
# this host only (the cache of a machine that built the main crate then needs just a few).
# A lock that no longer matches fuzz/Cargo.toml (a crate renamed or added) is the repository's
# fault, not the machine's: that fails instead of skipping.
host=$(rustc -vV | sed -n 's/^host: //p')
if ! fetch_err=$(timeout 600 cargo fetch --locked --manifest-path fuzz/Cargo.toml --target "$host" 2>&1); then
  if grep -q "cannot update the lock file" <<<"$fetch_err"; then
    echo "fuzz.sh: fuzz/Cargo.lock is out of date with fuzz/Cargo.toml; refresh it with" >&2
    echo "  cargo metadata --manifest-path fuzz/Cargo.toml --format-version 1 >/dev/null" >&2
    exit 1
  fi
  skip "the fuzz crate's dependencies could not be fetched (no network and no cache?)"
fi

# 3. The toolchain: a C++ compiler for libFuzzer, and rustc's coverage instrumentation.
cxx=${CXX:-c++}
command -v "$cxx" >/dev/null 2>&1 || skip "no C++ compiler ($cxx) to build libFuzzer"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'pub fn f(x: u8) -> bool { x == 7 }' >"$probe/p.rs"
rustc --edition 2021 -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-trace-compares \
  --cfg fuzzing --crate-type=lib --emit=obj -o "$probe/p.o" "$probe/p.rs" >"$probe/log" 2>&1 \
  || skip "rustc cannot build coverage-instrumented code: $(head -c 300 "$probe/log")"
if [ "$sanitizer" != none ]; then
  rustc --edition 2021 "-Zsanitizer=$sanitizer" --crate-type=lib --emit=obj -o "$probe/s.o" "$probe/p.rs" >"$probe/log" 2>&1 \
    || skip "rustc cannot build with -Zsanitizer=$sanitizer: $(head -c 300 "$probe/log")"
fi

flags=(--sanitizer "$sanitizer")
if [ "$build" = 1 ]; then
  start=$(date +%s)
  # All targets at once: the library is compiled once for all of them.
  if ! cargo fuzz build "${flags[@]}" >"$probe/build.log" 2>&1; then
    tail -n 40 "$probe/build.log"
    echo "fuzz.sh: cargo fuzz build failed (the toolchain builds instrumented code, so this is the fuzz crate)" >&2
    exit 1
  fi
  echo "fuzz.sh: built ${#all_targets[@]} targets (sanitizer $sanitizer) in $(( $(date +%s) - start )) s"
fi

logs=fuzz/target/fuzz-logs
mkdir -p "$logs"
failed=()
total_runs=0
printf '%-14s %12s %8s %8s %7s %6s  %s\n' target executions cov ft corpus secs result
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  [ -d "fuzz/seeds/$t" ] || { echo "fuzz.sh: fuzz/seeds/$t is missing" >&2; exit 1; }
  log="$logs/$t.log"
  start=$(date +%s)
  # New inputs go into the first directory (the working corpus); the seeds are only read.
  cargo fuzz run "${flags[@]}" "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  line=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -n 1)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$line")
  result=ok
  if [ "$rc" != 0 ]; then
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    result="FAILED (exit $rc) ${artifact:-see $log}"
    failed+=("$t")
  fi
  total_runs=$(( total_runs + ${runs:-0} ))
  printf '%-14s %12s %8s %8s %7s %6s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$secs" "$result"
  if [ "$rc" != 0 ]; then
    grep -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" | head -n 5 | sed 's/^/    /'
    # The panic's message: the line after "panicked at".
    grep -A2 'panicked at' "$log" | head -n 4 | sed 's/^/    /'
  fi
done
echo "fuzz.sh: $total_runs executions in total; logs in $logs/"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
