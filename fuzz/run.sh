#!/usr/bin/env bash
# Runs every fuzz target under libFuzzer (cargo fuzz, stable toolchain, no sanitizer, with
# debug assertions and overflow checks) for TANSA_FUZZ_SECONDS seconds each (60 by
# default), starting from fuzz/corpus/<target>/ and fuzz/regressions/<target>/, and prints
# the executions of each. New corpus entries go to a temporary directory (the checked-in
# corpus is not changed); a crash, an abort (such as the memory bound of the target), or an
# input slower than 10 s is saved under fuzz/artifacts/<target>/ and fails the run.
#
#   TANSA_FUZZ_SECONDS=60 bash fuzz/run.sh              # every target
#   TANSA_FUZZ_TARGETS="memory cpu" bash fuzz/run.sh    # some of them
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"
seconds="${TANSA_FUZZ_SECONDS:-60}"
targets="${TANSA_FUZZ_TARGETS:-container frames memory cpu retrace plan segment leftover}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi
cargo fuzz build --sanitizer none --debug-assertions

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
summary=()
for t in $targets; do
    dirs=("$work/$t" "corpus/$t")
    mkdir -p "$work/$t"
    if [ -d "regressions/$t" ]; then dirs+=("regressions/$t"); fi
    log="$work/$t.log"
    status=0
    cargo fuzz run --sanitizer none --debug-assertions "$t" "${dirs[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
    corpus="$(ls "$work/$t" | wc -l)"
    if [ "$status" -ne 0 ]; then
        failed+=("$t")
        echo "== $t: FAILED (status $status)"
        grep -E 'panicked|memory bound|SUMMARY|Test unit written|timeout|ERROR' "$log" | head -20 || true
        tail -5 "$log"
    fi
    summary+=("$(printf '%-10s %10s executions in %ss, %s new corpus entries' "$t" "${runs:-?}" "$seconds" "$corpus")")
done
echo "fuzzing summary:"
printf '  %s\n' "${summary[@]}"
if ((${#failed[@]})); then
    echo "failed targets: ${failed[*]} (inputs under fuzz/artifacts/)"
    exit 1
fi
