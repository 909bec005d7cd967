#!/usr/bin/env bash
# Benchmark of the leak check at exit (`tansa record --leak-check`): what it costs a run.
# Records each workload ROUNDS times without and with --leak-check, alternating, and prints
# each wall time and the medians, with the plain run's:
#   sqlite   bench/sqlite.sql in sqlite3 :memory: (3 M calls; few blocks left at exit)
#   lost     tests/.../lost_many.c with 10 threads and 1,000,000 blocks left at exit
#            (every tenth lost): the cost of the check itself
# and the leak summary of the last `lost` recording, and what reading the check's findings
# costs `tansa report` (the same workload recorded with and without the check, alternating).
# Prints figures; asserts nothing.
#
#   bash bench/leakcheck.sh [ROUNDS]     # default 5
#
# Needs cc and sqlite3 (.ci/install-deps). Files go to bench/out/leakcheck/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/bench/out/leakcheck"
rm -rf "$out" && mkdir -p "$out"
rounds=${1:-5}

cargo build --release -q -p tansa-cli -p tansa-agent
tansa="$root/target/release/tansa"
cc -O1 -g -pthread -o "$out/lost_many" crates/tansa-cli/tests/programs/lost_many.c

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

run() {
    local name=$1; shift
    local plain="" without="" with=""
    for _ in $(seq "$rounds"); do
        plain="$plain $(seconds "$@")"
        without="$without $(seconds "$tansa" record -o "$out/$name.tansa" -- "$@")"
        rm -f "$out/$name.tansa"
        with="$with $(seconds "$tansa" record --leak-check -o "$out/$name.tansa" -- "$@")"
        [ "$name" = lost ] || rm -f "$out/$name.tansa"
    done
    printf '%-7s plain: %s (median %s s)\n' "$name" "$plain" "$(echo "$plain" | median)"
    printf '%-7s record: %s (median %s s)\n' "$name" "$without" "$(echo "$without" | median)"
    printf '%-7s record --leak-check: %s (median %s s)\n' "$name" "$with" "$(echo "$with" | median)"
}

run sqlite sh -c "sqlite3 :memory: < bench/sqlite.sql"
run lost "$out/lost_many" 10 1000000
"$tansa" leaks "$out/lost.tansa" | sed -n '2,5p'
"$tansa" record -o "$out/lost-plain.tansa" -- "$out/lost_many" 10 1000000 > /dev/null 2>&1
report_plain="" report_check=""
for _ in $(seq "$rounds"); do
    report_plain="$report_plain $(seconds "$tansa" report "$out/lost-plain.tansa")"
    report_check="$report_check $(seconds "$tansa" report "$out/lost.tansa")"
done
printf 'report of lost, recorded without the check: %s (median %s s)\n' "$report_plain" "$(echo "$report_plain" | median)"
printf 'report of lost, recorded with it: %s (median %s s)\n' "$report_check" "$(echo "$report_check" | median)"
