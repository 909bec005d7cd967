#!/usr/bin/env bash
# Benchmark of `tansa record --leak-cause` (seed 001) on the spec's worked example
# (crates/tansa-cli/tests/programs/leakcause.c, built -O2 -g without frame pointers) with
# REQUESTS requests (100,000 by default), each doing WORK iterations of a busy loop
# besides its allocation (20,000 by default: the bare example does nothing else, and its
# 100,000 requests would be over in 4 ms, before any scan): the wall time of the plain
# program, of plain `tansa record`, and of `tansa record --leak-cause --scan-interval SCAN`
# (median of RUNS runs; SCAN 50ms by default), the number of
# traced allocations, the time spent following per traced allocation, and the diagnosis.
# Target: --leak-cause at most 3x plain `tansa record`. With EXTRA (another tansa binary, e.g.
# the one before a change), each round also times that binary, and both are printed.
#
# With LOAD=N, a second part: tracing under load. N busy loops run while the example's
# multi-threaded form (500,000 requests on 4 threads, as the CLI test runs it) is recorded
# with --scan-interval 10ms, RUNS times in turn with each binary (this one, and EXTRA if
# given, e.g. the tansa before a change); each run prints how tracing ended (covered: it saw
# every path; limit: --traces ran out), how many allocations were traced, the cause branch's
# line and the range moves, then the medians.
#
# Usage: bench/leakcause.sh            (builds tansa in release mode; writes under bench/out)
#        RUNS=3 REQUESTS=1000000 bench/leakcause.sh
#        LOAD=6 RUNS=8 EXTRA=/path/to/other/tansa bench/leakcause.sh
# Needs: cc, python3. Prints figures; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-5}"
REQUESTS="${REQUESTS:-100000}"
SCAN="${SCAN:-50ms}"
WORK="${WORK:-20000}"
out=bench/out/leakcause
mkdir -p "$out"
cargo build -q --release -p tansa-cli -p tansa-agent
tansa="$PWD/target/release/tansa"
cc -g -O2 -fomit-frame-pointer -pthread -o "$out/leakcause" crates/tansa-cli/tests/programs/leakcause.c

python3 - "$tansa" "$out" "$REQUESTS" "$RUNS" "$SCAN" "$WORK" ${EXTRA:+"$EXTRA"} <<'PY'
import json, os, statistics, subprocess, sys, time
tansa, out, requests, runs, scan, work = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
binaries = [tansa] + sys.argv[7:]
prog = [os.path.join(out, "leakcause"), requests, "1", work]

def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t

# Each round: the program, then plain `tansa record` and `--leak-cause` with each binary.
plain = []
record = {b: [] for b in binaries}
cause = {b: [] for b in binaries}
rec = os.path.join(out, "plain.tansa")
lc = os.path.join(out, "cause.tansa")
for _ in range(runs):
    plain.append(timed(prog))
    # This tansa last: the diagnosis below reads its recording.
    for b in reversed(binaries):
        record[b].append(timed([b, "record", "-o", rec, "--"] + prog))
        cause[b].append(timed([b, "record", "--leak-cause", "--scan-interval", scan, "-o", lc, "--"] + prog))
m = statistics.median
print(f"leakcause.c -O2, {requests} requests of {work} loop iterations each, median of {runs} runs:")
print(f"  program alone          {m(plain):8.3f} s")
for b in binaries:
    r = sorted(c / p for c, p in zip(cause[b], record[b]))
    if len(binaries) > 1:
        print(f"  {b}:")
    print(f"  tansa record           {m(record[b]):8.3f} s  ({m(record[b])/m(plain):.2f}x the program)")
    print(f"  tansa record --leak-cause --scan-interval {scan} {m(cause[b]):5.3f} s  ({m(cause[b])/m(record[b]):.2f}x plain tansa record; target <= 3x)")
    print(f"    per round, --leak-cause against that round's plain record: median {m(r):.2f}x, {r[0]:.2f}-{r[-1]:.2f}")
    slow = sum(c > 2 * m(cause[b]) for c in cause[b])
    print(f"    slowest --leak-cause run {max(cause[b]):.3f} s; runs over twice the median: {slow} of {runs}")
r = json.loads(subprocess.run([tansa, "leaks", lc, "--format", "json"], check=True,
                              capture_output=True).stdout)
for s in r["sites"]:
    if s["tracing"] is None:
        continue
    n = s["traces"]["freed"] + s["traces"]["not_freed"]
    print(f"  site {s['site']['function']}: {s['judgement']}, {n} traced allocations "
          f"({s['traces']['freed']} F, {s['traces']['not_freed']} E, {s['tracing']}), "
          f"{s['tracing_ms']:.1f} ms following = {s['tracing_ms']/max(n,1):.2f} ms per traced allocation")
    print(f"    cause functions: {[c['function'] for c in s['cause_functions']]}")
    print(f"    cause branches: {[(b['function'], b['line'], b['taken_on_leak']) for b in s['cause_branches']]}")
PY

[[ -z ${LOAD:-} ]] && exit 0
burners=()
for _ in $(seq "$LOAD"); do
  bash -c 'while :; do :; done' &
  burners+=($!)
done
trap 'kill "${burners[@]}" 2>/dev/null' EXIT
python3 - "$out" "$RUNS" "$LOAD" "$tansa" ${EXTRA:+"$EXTRA"} <<'PY'
import json, os, statistics, subprocess, sys
out, runs, load, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
prog = [os.path.join(out, "leakcause"), "500000", "4"]
lc = os.path.join(out, "load.tansa")
print(f"\nunder {load} busy loops: leakcause.c -O2, 500000 requests on 4 threads, --scan-interval 10ms")
got = {b: [] for b in binaries}
for i in range(runs):
    for b in binaries:
        subprocess.run([b, "record", "--leak-cause", "--scan-interval", "10ms", "-o", lc, "--"]
                       + prog, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = json.loads(subprocess.run([b, "leaks", lc, "--format", "json"], check=True,
                                      capture_output=True).stdout)
        s = next(s for s in r["sites"] if s["site"]["function"].endswith("!funcA"))
        n = s["traces"]["freed"] + s["traces"]["not_freed"]
        line = (s["cause_branches"] or [{}])[0].get("line")
        got[b].append((s["tracing"], n, s["tracing_ms"]))
        print(f"  run {i + 1} {b}: {s['tracing']}, {n} traced, cause branch line {line}, "
              f"{s['range_moves']} range moves, {s['tracing_ms']:.0f} ms following")
for b, rows in got.items():
    covered = sum(1 for r in rows if r[0] == "covered")
    print(f"{b}: covered in {covered} of {len(rows)} runs; traced allocations median "
          f"{statistics.median(r[1] for r in rows)}, following median "
          f"{statistics.median(r[2] for r in rows):.0f} ms")
PY
