#!/usr/bin/env bash
# How long `tansa record` takes to finish a durable recording after SIGTERM (issue 15 §2:
# "on SIGTERM tansa finishes the file within a second"), while the program ignores SIGTERM
# and goes on allocating from 2 threads (crates/tansa-cli/tests/programs/durable.c).
# Prints each run's time from the signal to the recorder's exit, and the median.
#
# Usage: bench/durable.sh [RUNS]   (default 7; builds tansa in release mode)
# Prints figures; asserts nothing. Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-7}
OUT=bench/out/durable
mkdir -p "$OUT"
cargo build --release -q -p tansa-cli -p tansa-agent
TANSA=$PWD/target/release/tansa
cc -g -O1 -pthread -o "$OUT/durable" crates/tansa-cli/tests/programs/durable.c
times=()
for i in $(seq "$RUNS"); do
    rm -f "$OUT/term.tansa"
    fifo="$OUT/ready.$$"
    rm -f "$fifo"; mkfifo "$fifo"
    "$TANSA" record --durable always -o "$OUT/term.tansa" -- \
        "$OUT/durable" 50 1000 2 ignore-term >"$fifo" 2>/dev/null &
    rec=$!
    read -r _ prog <"$fifo"
    rm -f "$fifo"
    sleep 0.5
    t0=$(date +%s.%N)
    kill -TERM "$rec"
    wait "$rec" || true
    t1=$(date +%s.%N)
    kill -KILL "$prog" 2>/dev/null || true
    t=$(python3 -c "print(f'{($t1 - $t0) * 1000:.1f}')")
    times+=("$t")
    echo "run $i: SIGTERM to finished recording: $t ms"
done
python3 -c "import sys, statistics; print(f'median of {len(sys.argv)-1}: {statistics.median(float(x) for x in sys.argv[1:]):.1f} ms')" "${times[@]}"
