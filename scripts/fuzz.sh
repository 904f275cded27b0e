#!/usr/bin/env bash
# Run every cargo-fuzz target of fuzz/ for SECONDS each (default 60).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# cargo-fuzz needs a nightly toolchain (-Zsanitizer); this script installs cargo-fuzz if it is
# missing, and says so plainly when no nightly can be had instead of pretending to fuzz.
# Corpora grow in fuzz/corpus/<target>/ (seeded from fuzz/seeds/<target>/); a crash is saved
# in fuzz/artifacts/<target>/ and makes this script exit non-zero.
set -euo pipefail

secs="${1:-60}"
shift || true
case "$secs" in
  ''|*[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz.sh: no nightly toolchain; trying: rustup toolchain install nightly --profile minimal" >&2
  if ! rustup toolchain install nightly --profile minimal; then
    echo "fuzz.sh: cannot install a nightly toolchain here; cargo-fuzz needs one. Nothing was fuzzed." >&2
    exit 1
  fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: cargo-fuzz missing; installing it (cargo install cargo-fuzz --locked)" >&2
  if ! cargo install cargo-fuzz --locked; then
    echo "fuzz.sh: cannot install cargo-fuzz here. Nothing was fuzzed." >&2
    exit 1
  fi
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

status=0
summary=()
for target in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$target"
  seeds=()
  [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
  log="$(mktemp)"
  echo "== fuzzing $target for ${secs}s"
  start=$(date +%s)
  # --debug-assertions: overflow checks too, so an absurd line number is a crash, not a wrap.
  if cargo +nightly fuzz run --debug-assertions "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tee "$log" | grep -E '^#[0-9]+.*(pulse|DONE)|SUMMARY|panicked|ERROR|Finished|Running'; then
    :
  fi
  rc=${PIPESTATUS[0]}
  took=$(( $(date +%s) - start ))
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 || true)
  if [ "$rc" -eq 0 ]; then
    summary+=("$target: ok, ${runs:-?} executions in ${took}s (incl. build), ${cov:-cov: ?}")
  else
    summary+=("$target: FAILED (exit $rc) after ${runs:-?} executions; see fuzz/artifacts/$target/ and $log")
    status=1
  fi
done

echo "== summary"
printf '  %s\n' "${summary[@]}"
exit "$status"
