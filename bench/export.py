#!/usr/bin/env python3
"""Exports and flame graphs benchmark (issue 12). Prints figures; asserts nothing.

    python3 bench/export.py [--runs N] [--iterations N] [--skip-build] [--no-sqlite]

Recordings: the allocation storm of bench/memory.py (bench/storm.c, 2 threads x N
iterations, 4 events each: 16M events at the default 2M iterations), Debian's sqlite3
building a 300k-row indexed table (bench/sqlite.sql), and a CPU recording of
bench/cpu/workload.c at 1 kHz.

For each heap recording: the median time (over --runs) and output size of
`tansa export --format pprof|collapsed|speedscope` and `tansa flamegraph`, beside
`heaptrack_print -F` (heaptrack's flame-graph stacks) on heaptrack's recording of the same
workload, followed by `inferno-flamegraph` on those stacks. For the CPU recording:
`tansa flamegraph` and `tansa export --format pprof` beside
`perf script | inferno-collapse-perf | inferno-flamegraph` on `perf record -g` of the same
workload. The inferno command-line tools are looked up on PATH and in
/work/.bench-tools/bin (`cargo install inferno --root /work/.bench-tools`).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")


def tool(name):
    return shutil.which(name) or (
        p if os.path.exists(p := os.path.join("/work/.bench-tools/bin", name)) else None)


def timed(cmd, stdin=None, stdout=None, shell=False):
    t0 = time.perf_counter()
    with open(stdin) if stdin else open(os.devnull) as inp, \
            open(stdout, "wb") if stdout else open(os.devnull, "wb") as out:
        p = subprocess.run(cmd, stdin=inp, stdout=out, stderr=subprocess.PIPE, shell=shell)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        sys.exit(f"failed ({p.returncode}): {cmd}\n{p.stderr.decode()[-2000:]}")
    return dt


def median_time(cmd, runs, **kw):
    return statistics.median(timed(cmd, **kw) for _ in range(runs))


def human(n):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def row(what, seconds, path):
    size = human(os.path.getsize(path)) if path and os.path.exists(path) else "-"
    print(f"  {what:<58} {seconds:8.3f} s  {size:>10}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=2_000_000)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args()
    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "--workspace", "-q"], cwd=ROOT, check=True)
    tansa = os.path.join(ROOT, "target", "release", "tansa")
    work = tempfile.mkdtemp(prefix="tansa-export-bench-")
    heaptrack = tool("heaptrack")
    heaptrack_print = tool("heaptrack_print")
    flamegraph_cli = tool("inferno-flamegraph")
    collapse_perf = tool("inferno-collapse-perf")
    perf = tool("perf")

    storm = os.path.join(work, "storm")
    subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", storm,
                    os.path.join(BENCH, "storm.c")], check=True)
    workloads = [("storm", [storm, str(args.iterations)], None)]
    sqlite = shutil.which("sqlite3")
    if sqlite and not args.no_sqlite:
        workloads.append(("sqlite", [sqlite, ":memory:"], os.path.join(BENCH, "sqlite.sql")))
    print(f"machine: {os.cpu_count()} CPUs; medians of {args.runs} runs; work dir {work}")

    for name, cmd, stdin in workloads:
        rec = os.path.join(work, f"{name}.tansa")
        timed([tansa, "record", "-o", rec, "--"] + cmd, stdin=stdin)
        print(f"\n{name}: recording {human(os.path.getsize(rec))}")
        t = median_time([tansa, "report", rec], args.runs)
        row("tansa report (for scale)", t, None)
        for fmt, ext in [("pprof", "pb.gz"), ("collapsed", "folded"),
                         ("speedscope", "speedscope.json")]:
            out = os.path.join(work, f"{name}.{ext}")
            t = median_time([tansa, "export", rec, "--format", fmt, "-o", out], args.runs)
            row(f"tansa export --format {fmt}", t, out)
        for weight in ["peak", "allocated"]:
            out = os.path.join(work, f"{name}-{weight}.svg")
            t = median_time([tansa, "flamegraph", rec, "--weight", weight, "-o", out], args.runs)
            row(f"tansa flamegraph --weight {weight}", t, out)
        if heaptrack and heaptrack_print:
            base = os.path.join(work, f"{name}.heaptrack")
            timed([heaptrack, "-o", base, "--"] + cmd, stdin=stdin)
            ht = next(os.path.join(work, f) for f in os.listdir(work)
                      if f.startswith(f"{name}.heaptrack"))
            stacks = os.path.join(work, f"{name}.heaptrack.stacks")
            t = median_time([heaptrack_print, "-f", ht, "-F", stacks], args.runs)
            row("heaptrack_print -F (its flame-graph stacks)", t, stacks)
            if flamegraph_cli:
                svg = os.path.join(work, f"{name}.heaptrack.svg")
                t2 = median_time([flamegraph_cli, stacks], args.runs, stdout=svg)
                row("  then inferno-flamegraph on them", t2, svg)
                row("  heaptrack_print -F + inferno-flamegraph", t + t2, None)
        else:
            print("  heaptrack not installed: no comparison")

    # CPU.
    cpu_dir = os.path.join(work, "cpu")
    os.makedirs(cpu_dir)
    lib = os.path.join(cpu_dir, "libwork.so")
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", lib,
                    os.path.join(BENCH, "cpu", "libwork.c")], check=True)
    wl = os.path.join(cpu_dir, "workload")
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-o", wl,
                    os.path.join(BENCH, "cpu", "workload.c"), f"-L{cpu_dir}", "-lwork",
                    f"-Wl,-rpath,{cpu_dir}"], check=True)
    rec = os.path.join(work, "cpu.tansa")
    timed([tansa, "sample", "-F", "1000", "-o", rec, "--", wl, "1600"])
    print(f"\ncpu: recording {human(os.path.getsize(rec))}")
    out = os.path.join(work, "cpu.svg")
    row("tansa flamegraph", median_time([tansa, "flamegraph", rec, "-o", out], args.runs), out)
    out = os.path.join(work, "cpu.pb.gz")
    row("tansa export --format pprof",
        median_time([tansa, "export", rec, "--format", "pprof", "-o", out], args.runs), out)
    if perf and flamegraph_cli and collapse_perf:
        data = os.path.join(work, "perf.data")
        timed([perf, "record", "-q", "-g", "-F", "1000", "-o", data, "--", wl, "1600"])
        svg = os.path.join(work, "perf.svg")
        pipeline = f"{perf} script -i {data} 2>/dev/null | {collapse_perf} | {flamegraph_cli}"
        t = median_time(pipeline, args.runs, stdout=svg, shell=True)
        row("perf script | inferno-collapse-perf | inferno-flamegraph", t, svg)
    else:
        print("  perf or inferno's command-line tools not found: no comparison")


if __name__ == "__main__":
    main()
