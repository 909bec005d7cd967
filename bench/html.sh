#!/usr/bin/env bash
# Benchmark of `tansa html` on a large recording (issue 12, section 3): records the storm
# workload of bench/memory.py (bench/storm.c: 2 threads x N iterations, 4 events each, 16M
# events by default), then prints the time of `tansa html` (and of `tansa report`, for
# comparison), the size of the page, and the time headless Chromium takes to load and draw
# it, as the page measures it (performance.now() when its drawing ends, written into
# #render-ms), over 3 loads. Prints figures; asserts nothing.
#
#   bash bench/html.sh [ITERATIONS]     # default 2000000
#
# Needs cc and chromium (.ci/install-deps). Files go to bench/out/html/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/bench/out/html"
rm -rf "$out" && mkdir -p "$out"
iters=${1:-2000000}

cargo build --release -q -p tansa-cli -p tansa-agent
tansa="$root/target/release/tansa"
cc -O2 -g -pthread -o "$out/storm" bench/storm.c

"$tansa" record -o "$out/storm.tansa" -- "$out/storm" "$iters" > /dev/null 2> "$out/record.log"
tail -n 2 "$out/record.log" | head -n 1

seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
report_s=$(seconds "$tansa" report "$out/storm.tansa" -o "$out/report.txt")
html_s=$(seconds "$tansa" html "$out/storm.tansa" -o "$out/storm.html" 2> /dev/null)
events=$(grep -o '[0-9,]* events' "$out/report.txt" | head -n 1)
size=$(stat -c %s "$out/storm.html")
echo "recording: $(stat -c %s "$out/storm.tansa") bytes, $events"
echo "tansa report: ${report_s} s"
echo "tansa html:   ${html_s} s"
echo "page:         ${size} bytes ($((size / 1024)) KiB)"

chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
    echo "chromium not installed: no load time (.ci/install-deps)"
    exit 0
fi
for i in 1 2 3; do
    profile=$(mktemp -d)
    t0=$(date +%s.%N)
    dom=$("$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" --dump-dom "file://$out/storm.html" 2> /dev/null)
    t1=$(date +%s.%N)
    rm -rf "$profile"
    ms=$(grep -o 'id="render-ms">[0-9]*' <<< "$dom" | grep -o '[0-9]*$')
    errors=$(grep -o '<pre id="errors">[^<]*</pre>' <<< "$dom")
    echo "load $i: drawn at ${ms} ms after navigation start (chromium run: $(echo "$t1 - $t0" | bc) s); $errors"
done
