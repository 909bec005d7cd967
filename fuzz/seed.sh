#!/usr/bin/env bash
# Seeds the fuzz corpora (fuzz/corpus/<target>/) from real recordings of the programs in
# fuzz/seeds/ made by `tansa record`, `tansa sample` and `tansa retrace record`, and from
# the leak-test plans of the test suite and the documentation. Run from anywhere; it
# replaces the seeds it makes and leaves the rest of the corpora alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build -q -p tansa-cli -p tansa-agent -p tansa-fuzz
tansa="$root/target/debug/tansa"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cc -g -O1 -pthread fuzz/seeds/heap.c -o "$work/heap"
cc -g -O1 fuzz/seeds/spin.c -o "$work/spin"
"$tansa" record -o "$work/heap.tansa" -- "$work/heap"
# With the leak check at exit, so that the seeds carry its records.
"$tansa" record --leak-check -o "$work/heap-leak-check.tansa" -- "$work/heap"
# As rank 1 of a 2-rank job, so that the seeds carry a SESSION_PLACE frame.
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 PMIX_NAMESPACE=seed-job \
    "$tansa" record --no-free-stacks -o "$work/heap-no-free-stacks.tansa" -- "$work/heap"
"$tansa" sample -o "$work/spin.tansa" -- "$work/spin" 3000
"$tansa" retrace record --region work --period 5 --executions 6 --ground-truth \
    -o "$work/spin-retrace.tansa" -- "$work/spin" 20 40

"$root/target/debug/tansa-fuzz-seed" fuzz/corpus "$work"/*.tansa

mkdir -p fuzz/corpus/plan
for p in crates/tansa-cli/tests/leaktest/plans/*.toml; do
    cp "$p" "fuzz/corpus/plan/test-$(basename "$p")"
done
# The plan of the documentation (its first TOML block).
awk '/^```toml/{on=1; next} /^```/{if (on) exit} on' docs/architecture/leaktest.md \
    > fuzz/corpus/plan/docs-plan.toml
ls fuzz/corpus/* | head -100
