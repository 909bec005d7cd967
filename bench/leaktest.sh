#!/usr/bin/env bash
# Benchmark of `tansa leaktest`: runs used per verdict against the naive method (a fixed 10
# runs per item), and wall time of the test-server suite.
#
#   bash bench/leaktest.sh            # all scenarios, then the test suite's wall time
#   SKIP_SUITE=1 bash bench/leaktest.sh
#
# Needs cc, python3 and memcached (run .ci/install-deps). Reports go to bench/out/leaktest/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/bench/out/leaktest"
rm -rf "$out" && mkdir -p "$out"

cargo build --release -q -p tansa-cli
tansa="$root/target/release/tansa"
cc -O1 -g -pthread -o "$out/leaky" crates/tansa-cli/tests/leaktest/leaky.c

plans=crates/tansa-cli/tests/leaktest/plans
scenarios=(flat leak cache error fdleak die conn conn-capped idle)
for s in "${scenarios[@]}"; do
    mkdir -p "$out/$s"
    sed "s#@SERVER@#$out/leaky#g" "$plans/$s.toml" > "$out/$s/plan.toml"
done

# memcached with an 8 MiB cap, filled by two items (as in tests/leaktest_memcached.rs).
if command -v memcached > /dev/null; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$out/memcached"
    item() {
        printf '\n[[item]]\nname = "%s"\ncommand = ["%s", "mc", "127.0.0.1", "%s", "{count}", "1000", "%s"]\ntimeout = "30s"\n' "$1" "$out/leaky" "$port" "$2"
        printf '[[item.param]]\nname = "count"\ndefault = 2000\nmin = 1000\nmax = 64000\n'
    }
    {
        printf '[settings]\nretest_limit = 5\nreading_interval = "20ms"\nsettle = "100ms"\n\n[thresholds]\nmemory = "256KiB"\n\n'
        printf '[[process]]\nname = "memcached"\ncommand = ["memcached", "-l", "127.0.0.1", "-p", "%s", "-U", "0", "-m", "8", "-t", "2", "-u", "root"]\nready_tcp = "127.0.0.1:%s"\nstart_settle = "100ms"\n' "$port" "$port"
        item fill a
        item fill-other b
    } > "$out/memcached/plan.toml"
    scenarios+=(memcached)
else
    echo "memcached is not installed (run .ci/install-deps): its scenario is skipped" >&2
fi

for s in "${scenarios[@]}"; do
    start=$(date +%s.%N)
    code=0
    "$tansa" leaktest "$out/$s/plan.toml" --format json -o "$out/$s/report.json" -q || code=$?
    end=$(date +%s.%N)
    echo "$s $code $start $end" >> "$out/times"
done

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
NAIVE = 10
rows = []
for line in open(f"{out}/times"):
    name, code, start, end = line.split()
    r = json.load(open(f"{out}/{name}/report.json"))
    items = len(r["items"])
    verdicts = sorted({res["verdict"] for it in r["items"] for res in it["results"]})
    if not r["items"]:
        verdicts = sorted({f["verdict"] for f in r["findings"]}) or ["no-growth"]
    runs = r["summary"]["runs"]
    per_item = {it["name"]: it["runs"] for it in r["items"]}
    rows.append((name, ",".join(verdicts), items, runs, NAIVE * items, per_item, int(code), float(end) - float(start)))

print("Runs used per verdict: tansa leaktest against the naive method (10 runs per item)")
print()
hdr = ("scenario", "verdict", "items", "tansa runs", "naive runs", "runs per item", "exit", "wall s")
w = [12, 14, 5, 10, 10, 34, 4, 6]
print("  ".join(h.ljust(n) for h, n in zip(hdr, w)))
total_t = total_n = 0
for name, v, items, runs, naive, per_item, code, secs in rows:
    total_t += runs
    total_n += naive
    pi = ", ".join(f"{k} {n}" for k, n in per_item.items()) or "(idle test: no runs)"
    cells = (name, v, str(items), str(runs), str(naive), pi, str(code), f"{secs:.2f}")
    print("  ".join(c.ljust(n) for c, n in zip(cells, w)))
print()
print(f"total: {total_t} runs by tansa leaktest, {total_n} by the naive method "
      f"({100 * (1 - total_t / total_n):.0f}% fewer); wall time of these scenarios "
      f"{sum(r[-1] for r in rows):.1f} s (release build)")
PY

if [ -z "${SKIP_SUITE:-}" ]; then
    echo
    echo "Wall time of the test-server suite (debug build, as CI runs it):"
    cargo test -q -p tansa-cli --test leaktest --no-run 2> /dev/null
    start=$(date +%s.%N)
    cargo test -q -p tansa-cli --test leaktest --test leaktest_memcached 2>&1 | grep -E "test result" || true
    end=$(date +%s.%N)
    python3 -c "print(f'  cargo test -p tansa-cli --test leaktest --test leaktest_memcached: {$end - $start:.1f} s')"
fi
