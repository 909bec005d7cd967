#!/usr/bin/env bash
# Benchmark of `tansa retrace` (seed 004): accuracy against single-stepped ground truth for
# several periods and execution counts, merge time of enumeration vs the dynamic program,
# and the slowdown of the target under each sample source.
#
# Usage: bench/retrace.sh            (builds tansa in release mode; writes under bench/out)
#        ONLY=accuracy bench/retrace.sh  (the accuracy and paths tables only)
#        REUSE=1 bench/retrace.sh    (keeps recordings already made)
# Needs: cc, python3, timeout. Prints figures; asserts nothing. Takes about 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out/retrace
mkdir -p "$OUT"
cargo build --release -q -p tansa-cli
TANSA=$PWD/target/release/tansa
PROG=$OUT/region
cc -O1 -g -fno-inline -o "$PROG" crates/tansa-ptrace/tests/programs/region.c
PATHS=$OUT/paths
cc -O1 -g -fno-inline -o "$PATHS" crates/tansa-ptrace/tests/programs/paths.c

field() { # field FILE.json python-expression-on-v
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print($2)" "$1"
}

record() { # record NAME ARGS... -- CMD...
  local name=$1; shift
  if [[ -n "${REUSE:-}" && -s "$OUT/$name.tansa" ]]; then return 0; fi
  "$TANSA" retrace record -o "$OUT/$name.tansa" "$@" 2>"$OUT/$name.log" >/dev/null
}

report() { # report NAME [OPTIONS...]  -> JSON file path
  local name=$1; shift
  local tag=${REPORT_TAG:-default}
  timeout "${REPORT_TIMEOUT:-600}" "$TANSA" retrace "$OUT/$name.tansa" --format json "$@" \
    >"$OUT/$name.$tag.json" 2>"$OUT/$name.$tag.err" || return 1
  echo "$OUT/$name.$tag.json"
}

echo "== Accuracy against single-stepped ground truth (ptrace source, region 'work' of region.c)"
echo "(lcs/edit: LCS ratio and normalised edit distance against the most frequent true path;"
echo " counts = the default: samples placed by their exact positions, gaps filled from the CFG;"
echo " linkage = --align merge (similarity merge, linkage groups); literal = --align merge"
echo " --similarity literal, the seed's procedure; top10 = --align merge --top-k 10 --ranking gain;"
echo " ms: rebuild time of counts / linkage)"
printf "%-30s %6s %7s %8s %14s %14s %14s %14s %14s\n" case T exec distinct "counts lcs/ed" "linkage lcs/ed" "literal lcs/ed" "top10 lcs/ed" "ms"
acc() { # acc JSON -> "lcs/ed"
  field "$1" '"%.3f/%.3f" % (v["accuracy"]["lcs_ratio"], v["accuracy"]["edit_distance"])'
}
acc_row() { # acc_row NAME LABEL
  local c j l t
  c=$(REPORT_TAG=counts report "$1")
  j=$(REPORT_TAG=linkage report "$1" --align merge --merge dp)
  l=$(REPORT_TAG=literal report "$1" --align merge --merge dp --similarity literal)
  t=$(REPORT_TAG=top10 report "$1" --align merge --merge dp --top-k 10 --ranking gain)
  printf "%-30s %6s %7s %8s %14s %14s %14s %14s %14s\n" "$2" \
    "$(field "$j" 'v["accuracy"]["truth_length"]')" "$(field "$j" 'v["executions"]')" \
    "$(field "$j" 'v["distinct_partials"]')" "$(acc "$c")" "$(acc "$j")" "$(acc "$l")" "$(acc "$t")" \
    "$(field "$c" '"%.1f" % (v["merge"]["seconds"]*1e3)')/$(field "$j" '"%.1f" % (v["merge"]["seconds"]*1e3)')"
}
for p in 3 7 31 101 1009; do
  record "p$p" --region work --source ptrace --period "$p" --executions 1000 --ground-truth -- "$PROG" 2000
  acc_row "p$p" "P=$p, 1000 executions"
done
for n in 100 1000 10000; do
  record "n$n" --region work --source ptrace --period 101 --executions "$n" --ground-truth -- "$PROG" $((n + 10))
  acc_row "n$n" "P=101, $n executions"
done
record m10000 --region work --source ptrace --period 1009 --executions 10000 --ground-truth -- "$PROG" 10010
acc_row m10000 "P=1009, 10000 executions"
record big --region work --source ptrace --period 101 --executions 2000 --ground-truth -- "$PROG" 2010 100
acc_row big "P=101, 2000 exec, 100 rounds"

echo
echo "== Paths: paths.c takes three paths (50/25/25 % of executions); per path, its share and"
echo "   LCS ratio against the true path of the same length (counts), vs one blended trace"
echo "   compared with the most frequent true path (linkage, literal)"
printf "%-30s %-58s %8s %8s\n" case "counts: share lcs (observed+filled/length) per path" linkage literal
paths_row() { # paths_row NAME LABEL
  local c j l
  c=$(REPORT_TAG=counts report "$1")
  j=$(REPORT_TAG=linkage report "$1" --align merge --merge dp)
  l=$(REPORT_TAG=literal report "$1" --align merge --merge dp --similarity literal)
  printf "%-30s %-58s %8s %8s\n" "$2" \
    "$(field "$c" '" ".join("%.2f:%.3f(%d+%d/%d)" % (p["share"], p["accuracy"]["lcs_ratio"], p["observed"], p["filled"], p["instructions"]) for p in v["paths"])')" \
    "$(field "$j" '"%.3f" % v["accuracy"]["lcs_ratio"]')" "$(field "$l" '"%.3f" % v["accuracy"]["lcs_ratio"]')"
}
for p in 7 31 101; do
  record "paths$p" --region work --source ptrace --period "$p" --executions 1000 --ground-truth -- "$PATHS" 2000
  paths_row "paths$p" "P=$p, 1000 executions"
done
record paths1009 --region work --source ptrace --period 1009 --executions 3000 --ground-truth -- "$PATHS" 3010
paths_row paths1009 "P=1009, 3000 executions"

echo
echo "== Sampler phase: cycle.c takes paths of 4/13/22/31 instructions in turn (70 = 10 x 7);"
echo "   per path LCS ratio and the headline (weighted over the true paths), P = 7"
CYCLE=$OUT/cycle
cc -O1 -g -fno-inline -o "$CYCLE" crates/tansa-ptrace/tests/programs/cycle.c
for phase in shuffled counted; do
  record "cycle_$phase" --region rec --source ptrace --phase "$phase" --executions 1000 --ground-truth -- "$CYCLE" 2000
  c=$(REPORT_TAG=counts report "cycle_$phase")
  printf "%-30s %-58s weighted %s\n" "--phase $phase" \
    "$(field "$c" '" ".join("%d:%.3f" % (p["instructions"], p["accuracy"]["lcs_ratio"]) for p in v["paths"])')" \
    "$(field "$c" '"%.3f" % v["accuracy"]["weighted_lcs_ratio"]')"
done

[[ "${ONLY:-}" == accuracy ]] && exit 0

echo
echo "== Merge time: enumeration (the seed's C(a+b,a) patterns) vs dynamic programming"
echo "(same merges, same result; enumeration is stopped after 120 s)"
printf "%-30s %12s %14s %14s %16s\n" recording distinct enumerate_ms dp_ms max_patterns
for name in p3 p7 p31 p101 big; do
  dp=$(REPORT_TAG=dp report "$name" --align merge --merge dp)
  if en=$(REPORT_TIMEOUT=120 REPORT_TAG=enum report "$name" --align merge --merge enumerate); then
    en_ms=$(field "$en" 'round(v["merge"]["seconds"]*1e3, 2)')
    same=$(python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); print(a['trace']==b['trace'])" "$dp" "$en")
    [[ $same == True ]] || en_ms="$en_ms (differs!)"
  elif [[ -s "$OUT/$name.enum.err" ]]; then
    en_ms="infeasible"
  else
    en_ms="> 120 s"
  fi
  printf "%-30s %12s %14s %14.2f %16s\n" "$name" "$(field "$dp" 'v["distinct_partials"]')" "$en_ms" \
    "$(field "$dp" 'v["merge"]["seconds"]*1e3')" "$(field "$dp" '"> 1.8e19" if v["merge"]["max_patterns"] >= 2**64 - 1 else v["merge"]["max_patterns"]')"
done
echo "(infeasible: a merge step has more than 50,000,000 patterns; see $OUT/*.enum.err)"
echo "(max_patterns: largest C(a+b, a) of a merge step)"

echo
echo "== Slowdown of the target under each sample source (region.c, about 400 instructions per execution)"
native_runs=20000000
t0=$(date +%s.%N); "$PROG" $native_runs; t1=$(date +%s.%N)
native=$(python3 -c "print(($t1-$t0)/$native_runs)")
printf "native: %.1f ns per execution\n" "$(python3 -c "print($native*1e9)")"
printf "%-40s %12s %16s %12s\n" source executions us_per_execution slowdown
slow_row() { # slow_row NAME LABEL
  local j; j=$(report "$1" --merge dp)
  local secs n
  secs=$(field "$j" 'v["recording_seconds"]'); n=$(field "$j" 'v["executions"]')
  printf "%-40s %12s %16.2f %12.0fx\n" "$2" "$n" "$(python3 -c "print($secs/($n+1)*1e6)")" \
    "$(python3 -c "print($secs/($n+1)/$native)")"
}
record s_ptrace --region work --source ptrace --period 7 --executions 5000 -- "$PROG" 100000
slow_row s_ptrace "ptrace single-step, P=7"
record s_clock --region work --source cpu-clock --hz 100000 --executions 5000 -- "$PROG" 100000
slow_row s_clock "cpu-clock, 100 kHz (10 us)"
if record s_hw --region work --source instructions --period 10007 --executions 5000 -- "$PROG" 100000; then
  slow_row s_hw "instructions (PMU), P=10007"
else
  echo "instructions (PMU): not available here: $(tail -1 "$OUT/s_hw.log")"
fi
