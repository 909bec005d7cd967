#!/usr/bin/env python3
"""Heap-recorder benchmark (issue 2, section 7). Prints figures; asserts nothing.

    python3 bench/memory.py [--runs N] [--iterations N] [--skip-build] [--no-sqlite]

Variants also include sampled mode (`tansa record --sample-rate 512KiB`), durable mode
(`tansa record --durable always`) and compression whatever the CPUs' load
(`tansa record --compress always`).

Workloads:
  (a) storm:  bench/storm.c, 2 threads x N iterations of malloc/free + ring replacement at
              call depth ~20 (4 events per iteration).
  (b) sqlite: Debian's sqlite3 building a 300k-row table with an index in :memory:.
  (c) churn:  a thread per request, crates/tansa-cli/tests/programs/threadchurn.c: N threads,
              8 alive at a time, 4 malloc/free pairs each (the report must count them all).

For each workload, in alternating order within every round, medians (and the slowest run)
over --runs rounds of whole-process wall time for: plain, `tansa record`, `tansa record --no-free-stacks`, and
heaptrack (when installed). Then: ratios to plain, recording bytes per event, peak RSS of
the target (plain / tansa / heaptrack) and of the tansa collector, and the time of
`tansa report` against `heaptrack_print` on the same workload.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")


def run(cmd, stdin=None, env=None):
    """Runs cmd; returns (seconds, stderr text)."""
    t0 = time.perf_counter()
    with open(stdin) if stdin else open(os.devnull) as inp:
        p = subprocess.run(cmd, stdin=inp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=env, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return dt, p.stderr


def maxrss(text, last=False):
    values = [int(v) for v in re.findall(r"maxrss_kb=(\d+)", text)]
    if not values:
        return None
    return values[-1] if last else values[0]


def human(n):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=2_000_000)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--churn-threads", type=int, default=20_000,
                    help="threads of the churn workload (0: skip it)")
    args = ap.parse_args()

    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "--workspace", "-q"], cwd=ROOT, check=True)
    tansa = os.path.join(ROOT, "target", "release", "tansa")
    work = tempfile.mkdtemp(prefix="tansa-bench-")
    storm = os.path.join(work, "storm")
    wrapper = os.path.join(work, "maxrss")
    subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", storm, os.path.join(BENCH, "storm.c")], check=True)
    subprocess.run(["cc", "-O2", "-o", wrapper, os.path.join(BENCH, "maxrss.c")], check=True)
    heaptrack = shutil.which("heaptrack")
    heaptrack_print = shutil.which("heaptrack_print")
    sqlite = shutil.which("sqlite3")

    workloads = [("storm", [storm, str(args.iterations)], None)]
    if args.churn_threads > 0:
        churn = os.path.join(work, "threadchurn")
        subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", churn,
                        os.path.join(ROOT, "crates", "tansa-cli", "tests", "programs", "threadchurn.c")],
                       check=True)
        workloads.append(("churn", [churn, str(args.churn_threads), "8"], None))
    if sqlite and not args.no_sqlite:
        workloads.append(("sqlite", [sqlite, ":memory:"], os.path.join(BENCH, "sqlite.sql")))
    elif not args.no_sqlite:
        print("sqlite3 not installed: skipping workload (b) (apt-get install sqlite3)")

    print(f"machine: {os.cpu_count()} CPUs; runs per variant: {args.runs}; "
          f"heaptrack: {'yes' if heaptrack else 'no'}")
    for name, cmd, stdin in workloads:
        rec = os.path.join(work, f"{name}.tansa")
        ht = os.path.join(work, f"{name}.heaptrack")
        def record(out, *options):
            """`tansa record OPTIONS -o OUT`, the previous OUT removed first, untimed: replacing
            a file of 100 MiB (the storm's) frees its pages, which is not the recorder's cost,
            and a durable recording never replaces one."""
            def go():
                if os.path.exists(out):
                    os.remove(out)
                return run([wrapper, tansa, "record", *options, "-o", out, "--", wrapper] + cmd, stdin)
            return go

        variants = {
            "plain": lambda: run([wrapper] + cmd, stdin),
            "tansa": record(rec),
            # Event chunks compressed even while the CPUs are busy (the default stores them
            # as they are then).
            "tansa --compress always": record(rec + ".z", "--compress", "always"),
            "tansa --no-free-stacks": record(rec + ".nf", "--no-free-stacks"),
            # Durable recording (issue 15 §2): segments backed by files next to the
            # recording, ring space reused only once it is in the file.
            "tansa --durable always": record(rec + ".durable", "--durable", "always"),
            # Sampled heap mode (issue 13 §2), at the rate tcmalloc and Go use by default.
            "tansa --sample-rate 512KiB": record(rec + ".sampled", "--sample-rate", "512KiB"),
        }
        if heaptrack:
            # heaptrack does not follow child processes: it must run the target itself.
            variants["heaptrack"] = lambda: run([wrapper, heaptrack, "-o", ht] + cmd, stdin)
        times = {k: [] for k in variants}
        target_rss = {k: [] for k in variants}
        collector_rss = []
        for _ in range(args.runs):
            for k, f in variants.items():
                dt, err = f()
                times[k].append(dt)
                # The inner wrapper (around the target) reports first, the outer one (around
                # the tool) last.
                target_rss[k].append(maxrss(err))
                if k == "tansa":
                    collector_rss.append(maxrss(err, last=True))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"\n== workload {name}: {' '.join(os.path.basename(c) for c in cmd)}"
              f"{' < ' + os.path.basename(stdin) if stdin else ''}")
        # The slowest run shows a cost only some runs pay (one that depends on where
        # address-space randomization put things), which the median hides.
        print(f"{'variant':26} {'median s':>9} {'ratio':>7} {'slowest s':>10} "
              f"{'target peak RSS':>16}")
        for k in variants:
            rss = statistics.median([r for r in target_rss[k] if r is not None] or [0])
            # Under heaptrack only the whole tool is measured (target and interpreter).
            label = human(rss * 1024) + (" (all)" if k == "heaptrack" else "")
            print(f"{k:26} {med[k]:9.3f} {med[k] / med['plain']:7.2f} {max(times[k]):10.3f} "
                  f"{label:>16}")
        report = json.loads(subprocess.run([tansa, "report", rec, "--format", "json"],
                                           capture_output=True, check=True).stdout)
        events = report["events"]
        if name == "churn":
            by_fn = json.loads(subprocess.run([tansa, "report", rec, "--by", "function", "--format", "json"],
                                              capture_output=True, check=True).stdout)
            work_unit = next(u for u in by_fn["units"] if u["unit"].endswith("!work"))
            print(f"churn exactness: {work_unit['calls']['malloc']} mallocs and "
                  f"{work_unit['calls']['free']} frees recorded of {4 * args.churn_threads} each; "
                  f"lost events: {by_fn['process']['lost_events']}")
        size = os.path.getsize(rec)
        print(f"recording: {events} events, {human(size)}, {size / max(events, 1):.2f} bytes/event "
              f"(--no-free-stacks: {human(os.path.getsize(rec + '.nf'))})")
        print(f"tansa collector peak RSS: {human(statistics.median(collector_rss) * 1024)}")
        if heaptrack:
            print(f"ratio tansa/plain {med['tansa'] / med['plain']:.2f} vs heaptrack/plain "
                  f"{med['heaptrack'] / med['plain']:.2f} (heaptrack ratio / tansa ratio = "
                  f"{(med['heaptrack'] / med['plain']) / (med['tansa'] / med['plain']):.1f})")
        # Report time against heaptrack_print.
        rt = statistics.median([run([tansa, "report", rec])[0] for _ in range(3)])
        line = f"tansa report: {rt:.3f} s"
        if heaptrack_print:
            htfile = next((os.path.join(work, f) for f in os.listdir(work)
                           if f.startswith(f"{name}.heaptrack")), None)
            if htfile:
                hp = statistics.median([run([heaptrack_print, htfile])[0] for _ in range(3)])
                line += (f"; heaptrack_print: {hp:.3f} s (tansa report time / heaptrack_print "
                         f"time = {rt / hp:.2f})")
        print(line)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
