#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time, one process at a time; prints the
# executions per target and in total; exits non-zero when a target crashed (the input is
# then in fuzz/artifacts/<target>/). Not part of CI: it needs nightly and takes minutes.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
#
# Environment: FLUE_FUZZ_TARGETS="a b" runs only those targets; FLUE_FUZZ_SANITIZER
# (none | address, default none: the code under test has no unsafe of its own, and
# without a sanitizer a shared 2-core machine runs about twice the executions).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET]  (a whole number of seconds, got '$seconds')" >&2
  exit 2
fi
sanitizer="${FLUE_FUZZ_SANITIZER:-none}"

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzzing needs the nightly toolchain: rustup toolchain install nightly" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install --locked cargo-fuzz
fi

targets="${FLUE_FUZZ_TARGETS:-$(cargo +nightly fuzz list)}"
# -a: debug assertions on (integer overflow panics), as in a test build.
cargo +nightly fuzz build -s "$sanitizer" -a

total=0
failed=()
report=""
for target in $targets; do
  corpus="corpus/$target"
  mkdir -p "$corpus" "artifacts/$target"
  log="artifacts/$target/last-run.log"
  echo "fuzzing $target for ${seconds}s" >&2
  status=0
  # The seeds are read, never written; new inputs go to the corpus (not in git).
  # -timeout: one input taking 10 s counts as a crash (a hang); -rss_limit_mb: so does
  # growing past 2 GiB.
  cargo +nightly fuzz run -s "$sanitizer" -a "$target" "$corpus" "seeds/$target" -- \
    -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  execs="${execs:-0}"
  total=$((total + execs))
  if [ "$status" -ne 0 ]; then
    failed+=("$target")
    report+="$(printf '%-20s %12s  CRASH (exit %s), see fuzz/%s' "$target" "$execs" "$status" "$log")"$'\n'
    grep -E 'panicked at|ERROR: libFuzzer|Test unit written to' "$log" >&2 || true
  else
    report+="$(printf '%-20s %12s' "$target" "$execs")"$'\n'
  fi
done

printf '%-20s %12s\n' target executions
printf '%s' "$report"
printf '%-20s %12s\n' total "$total"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "crashed: ${failed[*]}" >&2
  exit 1
fi
