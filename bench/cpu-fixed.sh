#!/usr/bin/env bash
# The fixed costs of `tansa sample` (issue 13 §4): the whole run's wall time of
# `tansa sample -F 1000 -- workload ROUNDS` against the plain workload, and `perf record -g`
# for reference. Each case also reports the workload's own elapsed time (it prints it), so
# the difference between the two is the recorder's start-up and finishing. The cases run
# in turn, RUNS times (alternating, so that a change of the machine's load affects them
# alike); the medians are printed. With TANSA_TIMINGS=1 tansa prints its phase durations:
# their medians over the runs follow.
#
# Usage: bench/cpu-fixed.sh               (builds tansa in release mode; writes under bench/out)
#        RUNS=15 bench/cpu-fixed.sh
#        EXTRA=/path/to/other/tansa bench/cpu-fixed.sh   (also times another tansa binary,
#                                                          e.g. the one before a change;
#                                                          with its agent source too)
#        NO_PERF=1 RUNS=21 bench/cpu-fixed.sh    (leaves perf out: more rounds in the time;
#                                                  with perf, `perf record -g` and a bare
#                                                  `perf record -e cpu-clock` run too)
#        NO_AGENT=1 bench/cpu-fixed.sh           (leaves out `tansa sample --source agent`,
#                                                  the in-process sampler)
# Besides the medians, each case's overhead is given per round against that round's plain
# run (the median of those paired ratios, and their spread): a change of the machine's
# speed between rounds then cancels out, which the medians of whole runs do not undo.
# Needs: cc, perf, python3. Prints figures; asserts nothing. About RUNS x 16 s on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out/cpu-fixed
mkdir -p "$OUT"
RUNS=${RUNS:-9}
ROUNDS=${ROUNDS:-1000}   # about 1.7 s of CPU time for the workload
cargo build --release -q -p tansa-cli
TANSA=$PWD/target/release/tansa
cc -O2 -g -fomit-frame-pointer -shared -fPIC -o "$OUT/libwork.so" bench/cpu/libwork.c
cc -O2 -g -fomit-frame-pointer -o "$OUT/workload" bench/cpu/workload.c \
  -L"$OUT" -lwork -Wl,-rpath,"$PWD/$OUT"
W=$OUT/workload

CASES=(plain tansa)
[[ -z ${NO_AGENT:-} ]] && CASES+=(agent)
[[ -z ${NO_PERF:-} ]] && CASES+=(perf perf-bare)
[[ -n ${EXTRA:-} ]] && CASES+=(extra)
[[ -n ${EXTRA:-} && -z ${NO_AGENT:-} ]] && CASES+=(extra-agent)
prefix() {
  case $1 in
    plain) ;;
    tansa) echo "$TANSA sample -F 1000 -o $OUT/tansa.tansa --" ;;
    agent) echo "$TANSA sample -F 1000 --source agent -o $OUT/agent.tansa --" ;;
    extra) echo "$EXTRA sample -F 1000 -o $OUT/extra.tansa --" ;;
    extra-agent) echo "$EXTRA sample -F 1000 --source agent -o $OUT/extra-agent.tansa --" ;;
    perf) echo "perf record -q -g -F 1000 -o $OUT/perf.data --" ;;
    # The kernel's own cost of a 1 kHz cpu-clock sample, with nothing but the IP: the
    # floor under any perf_event_open sampler (its "workload" column).
    perf-bare) echo "perf record -q -e cpu-clock -F 1000 -o $OUT/perf-bare.data --" ;;
  esac
}
# The first per-task perf event after none for a second waits for an RCU grace period in
# the kernel (it enables the perf_sched_events static key; the key is disabled a second
# after the last such event closes). A case run right after a sampling case would not pay
# it: every case starts after a pause of GAP seconds, so that each pays it, as a first run.
GAP=${GAP:-1.2}
for i in $(seq "$RUNS"); do
  for c in "${CASES[@]}"; do
    sleep "$GAP"
    t0=$(date +%s%N)
    # shellcheck disable=SC2046
    TANSA_TIMINGS=1 $(prefix "$c") "$W" "$ROUNDS" >/dev/null 2>"$OUT/$c.$i.err" \
      || { cat "$OUT/$c.$i.err" >&2; exit 1; }
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 )) >"$OUT/$c.$i.wall"
  done
done
python3 - "$OUT" "$RUNS" "${CASES[@]}" <<'PY'
import re, statistics, sys
out, runs, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
def load(c):
    wall, own, phases = [], [], {}
    for i in range(1, runs + 1):
        wall.append(int(open(f"{out}/{c}.{i}.wall").read()) / 1000)
        err = open(f"{out}/{c}.{i}.err").read()
        own.append(float(re.search(r"elapsed_ms ([\d.]+)", err).group(1)))
        for name, ms in re.findall(r"tansa: timing (.+?)\s+([\d.]+) ms", err):
            phases.setdefault(name, []).append(float(ms))
    return wall, own, phases
data = {c: load(c) for c in cases}
pw, po = med(data["plain"][0]), med(data["plain"][1])
print(f"medians of {runs} alternating runs (ms); fixed: whole run minus the workload's own")
print(f"time, per run (the median of those differences)")
print(f"{'case':<10} {'whole run':>10} {'overhead':>9} {'workload':>10} {'overhead':>9} {'fixed':>8}")
for c in cases:
    w, o, _ = data[c]
    mw, mo = med(w), med(o)
    fixed = med(a - b for a, b in zip(w, o))
    print(f"{c:<10} {mw:10.1f} {100*(mw/pw-1):8.2f}% {mo:10.1f} {100*(mo/po-1):8.2f}% {fixed:8.1f}")
print(f"\noverhead per round against the same round's plain run (paired; {runs} rounds)")
print(f"{'':<10} {'whole run':^26} {'workload only':^26}")
print(f"{'case':<10} {'median':>8} {'lowest':>8} {'highest':>8} {'median':>8} {'lowest':>8} {'highest':>8}")
for c in cases:
    if c == "plain":
        continue
    cols = []
    for k in (0, 1):
        r = sorted(100 * (a / b - 1) for a, b in zip(data[c][k], data["plain"][k]))
        cols += [med(r), r[0], r[-1]]
    print(f"{c:<10} " + " ".join(f"{v:7.2f}%" for v in cols))
for c in cases:
    ph = data[c][2]
    if ph:
        print(f"\n{c}: phases (median ms over {runs} runs)")
        for name, v in ph.items():
            print(f"  {name:<30} {med(v):9.1f}")
PY
