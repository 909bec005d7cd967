#!/usr/bin/env bash
# Benchmark of `tansa sample` (seed 003) against `perf record -g`, on the same CPU-bound
# workload (bench/cpu/workload.c: 70 % of its iterations in the executable, 30 % in a
# shared library, built -O2 -g without frame pointers):
#
#  1. wall-time overhead at 1 kHz and 10 kHz: the workload's own elapsed time (it prints
#     it) under each recorder, median of RUNS runs, against the median without one;
#  2. recording size per sample;
#  3. a system-wide recording of about 1M samples (10 kHz on every CPU while one workload
#     per CPU runs), recorded by tansa and perf at the same time (the same run): report
#     time of `tansa report` against `perf report`, and each recorder's per-function
#     percentages side by side.
#
# Usage: bench/cpu.sh                (builds tansa in release mode; writes under bench/out)
#        RUNS=3 BIG_SECONDS=20 bench/cpu.sh   (quicker, fewer samples)
# Needs: root (system-wide sampling), cc, perf, python3. Prints figures; asserts nothing.
# Takes about 6 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out/cpu
mkdir -p "$OUT"
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-1600}
BIG_SECONDS=${BIG_SECONDS:-50}
cargo build --release -q -p tansa-cli
TANSA=$PWD/target/release/tansa
cc -O2 -g -fomit-frame-pointer -shared -fPIC -o "$OUT/libwork.so" bench/cpu/libwork.c
cc -O2 -g -fomit-frame-pointer -o "$OUT/workload" bench/cpu/workload.c \
  -L"$OUT" -lwork -Wl,-rpath,"$PWD/$OUT"
W="$OUT/workload"
NCPU=$(nproc)

median() { python3 -c "import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
elapsed() { grep elapsed_ms "$1" | awk '{print $2}'; }

run_case() { # run_case NAME CMD-PREFIX...   (prints the median elapsed ms)
  local name=$1; shift
  local times=()
  for i in $(seq "$RUNS"); do
    "$@" "$W" "$ROUNDS" >/dev/null 2>"$OUT/$name.$i.err" || { cat "$OUT/$name.$i.err" >&2; return 1; }
    times+=("$(elapsed "$OUT/$name.$i.err")")
  done
  median "${times[@]}"
}

echo "== 1. Wall-time overhead on the workload ($ROUNDS rounds, median of $RUNS runs)"
base=$(run_case base)
printf "%-34s %10s %9s %14s %12s\n" recorder elapsed_ms overhead samples bytes/sample
printf "%-34s %10.1f %9s\n" "none" "$base" "-"
for hz in 1000 10000; do
  for mode in dwarf fp; do
    name="tansa-$mode-$hz"
    ms=$(run_case "$name" "$TANSA" sample -F "$hz" --call-graph "$mode" -o "$OUT/$name.tansa" --)
    samples=$("$TANSA" report "$OUT/$name.tansa" --format json | python3 -c "import json,sys; print(json.load(sys.stdin)['total_samples'])")
    size=$(stat -c %s "$OUT/$name.tansa")
    printf "%-34s %10.1f %8.2f%% %14s %12.1f\n" "tansa sample -F $hz --call-graph $mode" "$ms" \
      "$(python3 -c "print(($ms/$base-1)*100)")" "$samples" "$(python3 -c "print($size/max($samples,1))")"
  done
  name="perf-g-$hz"
  ms=$(run_case "$name" perf record -q -g -F "$hz" -o "$OUT/$name.data" --)
  samples=$(perf report -i "$OUT/$name.data" --stdio --header-only 2>/dev/null | awk '/sample_freq|nr_samples/' | head -1 || true)
  samples=$(perf script -i "$OUT/$name.data" -F ip 2>/dev/null | grep -c . || true)
  size=$(stat -c %s "$OUT/$name.data")
  printf "%-34s %10.1f %8.2f%% %14s %12.1f\n" "perf record -g -F $hz" "$ms" \
    "$(python3 -c "print(($ms/$base-1)*100)")" "$samples" "$(python3 -c "print($size/max($samples,1))")"
done

echo
echo "== 2./3. About 1M samples: -a at 10 kHz for ${BIG_SECONDS}s on $NCPU CPUs, tansa and perf on the same run"
BIG_ROUNDS=$((BIG_SECONDS * 1000 * 11 / 10 / 3))   # about 3 ms a round; outlasts the recording
pids=()
for i in $(seq "$NCPU"); do "$W" "$BIG_ROUNDS" >/dev/null 2>&1 & pids+=($!); done
sleep 0.5
perf record -q -a -g -F 10000 -o "$OUT/big.data" -- sleep "$BIG_SECONDS" 2>"$OUT/big.perf.err" &
perfpid=$!
"$TANSA" sample -a -F 10000 --duration "$BIG_SECONDS" -o "$OUT/big.tansa" 2>"$OUT/big.tansa.err"
wait "$perfpid" || true
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true
tail -1 "$OUT/big.tansa.err"

t0=$(date +%s.%N)
"$TANSA" report "$OUT/big.tansa" --by function --format json >"$OUT/big.functions.json"
t1=$(date +%s.%N)
perf report -i "$OUT/big.data" --stdio --no-children --sort dso,sym --percent-limit 0.01 \
  >"$OUT/big.perf.txt" 2>/dev/null
t2=$(date +%s.%N)
perf report -i "$OUT/big.data" --stdio --no-children --sort dso,sym -g none --percent-limit 0.01 \
  >"$OUT/big.perf-flat.txt" 2>/dev/null
t3=$(date +%s.%N)
tsamples=$(python3 -c "import json; print(json.load(open('$OUT/big.functions.json'))['total_samples'])")
psamples=$(grep -m1 -o 'Samples: [0-9.]*[KM]\?' "$OUT/big.perf.txt" || true)
printf "%-48s %12s %10s %14s %12s\n" "" samples size_MB bytes/sample report_s
printf "%-48s %12s %10.1f %14.1f %12.2f\n" "tansa (report --by function, JSON)" "$tsamples" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.tansa")/1e6)")" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.tansa")/max($tsamples,1))")" \
  "$(python3 -c "print($t1-$t0)")"
pcount=$(perf script -i "$OUT/big.data" -F ip 2>/dev/null | grep -c . || true)
printf "%-48s %12s %10.1f %14.1f %12.2f\n" "perf (report --stdio, call graphs)" "$pcount" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.data")/1e6)")" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.data")/max($pcount,1))")" \
  "$(python3 -c "print($t2-$t1)")"
printf "%-48s %12s %10s %14s %12.2f\n" "perf (report --stdio -g none)" "" "" "" "$(python3 -c "print($t3-$t2)")"

echo
echo "== Per-function self percentages on that run (functions with at least 0.5 %)"
python3 - "$OUT/big.functions.json" "$OUT/big.perf-flat.txt" <<'EOF'
import json, re, sys
t = json.load(open(sys.argv[1]))
tansa = {}
for u in t["units"]:
    mod, _, fn = u["unit"].partition("!")
    tansa[(mod, fn)] = tansa.get((mod, fn), 0) + u["self_percent"]
perf = {}
for line in open(sys.argv[2]):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$", line)
    if m:
        dso = m.group(2)
        dso = "[kernel.kallsyms]" if dso.startswith("[kernel") else dso.rsplit("/", 1)[-1]
        perf[(dso, m.group(3))] = perf.get((dso, m.group(3)), 0) + float(m.group(1))
keys = sorted(set(k for k, v in tansa.items() if v >= 0.5) | set(k for k, v in perf.items() if v >= 0.5),
              key=lambda k: -max(tansa.get(k, 0), perf.get(k, 0)))
print(f"{'function':50} {'tansa %':>8} {'perf %':>8} {'diff':>7}")
worst = 0
for k in keys:
    a, b = tansa.get(k, 0.0), perf.get(k, 0.0)
    worst = max(worst, abs(a - b))
    print(f"{(k[0] + '!' + k[1])[:50]:50} {a:8.2f} {b:8.2f} {a - b:7.2f}")
print(f"largest difference: {worst:.2f} points")
EOF
