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
# Takes about 8 minutes. The machine's other load makes single runs vary by several
# percent: read the medians, and rerun with more RUNS when figures are close.
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

# The configurations, run in turn within each round so that a change of the machine's load
# (other builds) affects them all alike.
CASES=(base tansa-dwarf-1000 tansa-fp-1000 perf-g-1000 perf-dwarf-1000
       tansa-dwarf-10000 tansa-fp-10000 perf-g-10000 perf-dwarf-10000)
prefix() { # prefix CASE -> the recorder command line before the workload
  case $1 in
    base) ;;
    tansa-*) local m=${1#tansa-}; echo "$TANSA sample -F ${m#*-} --call-graph ${m%-*} -o $OUT/$1.tansa --" ;;
    perf-g-*) echo "perf record -q -g -F ${1#perf-g-} -o $OUT/$1.data --" ;;
    perf-dwarf-*) echo "perf record -q --call-graph dwarf,8192 -F ${1#perf-dwarf-} -o $OUT/$1.data --" ;;
  esac
}
echo "== 1. Wall-time overhead on the workload ($ROUNDS rounds; median of $RUNS rounds of all cases)"
for i in $(seq "$RUNS"); do
  for c in "${CASES[@]}"; do
    # shellcheck disable=SC2046
    $(prefix "$c") "$W" "$ROUNDS" >/dev/null 2>"$OUT/$c.$i.err" || { cat "$OUT/$c.$i.err" >&2; exit 1; }
  done
done
declare -A MS
for c in "${CASES[@]}"; do
  times=()
  for i in $(seq "$RUNS"); do times+=("$(elapsed "$OUT/$c.$i.err")"); done
  MS[$c]=$(median "${times[@]}")
done
base=${MS[base]}
printf "%-40s %10s %9s %10s %13s\n" recorder elapsed_ms overhead samples bytes/sample
printf "%-40s %10.1f %9s\n" "none" "$base" "-"
for c in "${CASES[@]:1}"; do
  ms=${MS[$c]}
  if [[ $c == tansa-* ]]; then
    f=$OUT/$c.tansa
    samples=$("$TANSA" report "$f" --format json | python3 -c "import json,sys; print(json.load(sys.stdin)['total_samples'])")
    m=${c#tansa-}; label="tansa sample -F ${m#*-} --call-graph ${m%-*}"
  else
    f=$OUT/$c.data
    samples=$(perf script -G -i "$f" -F ip 2>/dev/null | grep -c . || true)
    if [[ $c == perf-g-* ]]; then label="perf record -g -F ${c#perf-g-}"
    else label="perf record --call-graph dwarf -F ${c#perf-dwarf-}"; fi
  fi
  size=$(stat -c %s "$f")
  printf "%-40s %10.1f %8.2f%% %10s %13.1f\n" "$label" "$ms" \
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
printf "%-48s %12s %10s %14s %12s\n" "" samples size_MB bytes/sample report_s
printf "%-48s %12s %10.1f %14.1f %12.2f\n" "tansa (report --by function, JSON)" "$tsamples" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.tansa")/1e6)")" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.tansa")/max($tsamples,1))")" \
  "$(python3 -c "print($t1-$t0)")"
pcount=$(perf script -G -i "$OUT/big.data" -F ip 2>/dev/null | grep -c . || true)
printf "%-48s %12s %10.1f %14.1f %12.2f\n" "perf (report --stdio, call graphs)" "$pcount" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.data")/1e6)")" \
  "$(python3 -c "print($(stat -c %s "$OUT/big.data")/max($pcount,1))")" \
  "$(python3 -c "print($t2-$t1)")"
printf "%-48s %12s %10s %14s %12.2f\n" "perf (report --stdio -g none)" "" "" "" "$(python3 -c "print($t3-$t2)")"

echo
echo "== Per-function self percentages on that run (functions with at least 0.5 %; names cut at"
echo "   the first '(' since the two demanglers spell C++ parameter lists differently)"
python3 - "$OUT/big.functions.json" "$OUT/big.perf-flat.txt" <<'EOF'
import json, re, sys
t = json.load(open(sys.argv[1]))
tansa = {}
for u in t["units"]:
    mod, _, fn = u["unit"].partition("!")
    fn = fn.split("(")[0]
    tansa[(mod, fn)] = tansa.get((mod, fn), 0) + u["self_percent"]
perf = {}
for line in open(sys.argv[2]):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$", line)
    if m:
        dso = m.group(2)
        dso = "[kernel.kallsyms]" if dso.startswith("[kernel") else dso.rsplit("/", 1)[-1]
        fn = m.group(3).split("(")[0]
        perf[(dso, fn)] = perf.get((dso, fn), 0) + float(m.group(1))
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
