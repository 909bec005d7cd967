#!/usr/bin/env python3
"""A/B of heap-recorder agents: the same `tansa record` with one agent or another.

    python3 bench/agent-ab.py [--rounds N] [--workload sqlite|storm|churn|build] A.so B.so [...]

Each round runs the plain workload, then `tansa record` with each agent in turn
(`TANSA_AGENT=X.so`, so the collector is the same), alternating so that a change of the
machine's load affects them alike; prints the median whole-run wall time of each and its
ratio to plain, then the mean and the slowest round (a cost that only some runs pay, such as
one that depends on where address-space randomization put the stack, shows there). Build the agents to compare first, e.g. `cargo build --release -p
tansa-agent` on each commit and copy `target/release/libtansa_agent.so` away. Prints
figures; asserts nothing.

Workloads: sqlite (Debian's sqlite3 building bench/sqlite.sql's table in :memory:), storm
(bench/storm.c, 2 threads x 2M iterations), churn (20,000 short threads, 8 at a time),
build (`make -s -j2` of bench/procs.py's 60 small C files: 60 compilers, each a new process
with deep, varied stacks; cleaned before every run).
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workload", choices=["sqlite", "storm", "churn", "build"], default="sqlite")
    ap.add_argument("agents", nargs="+", help="libtansa_agent.so files to compare")
    args = ap.parse_args()
    tansa = os.path.join(ROOT, "target", "release", "tansa")
    if not os.path.exists(tansa):
        sys.exit("build tansa first: cargo build --release")
    work = tempfile.mkdtemp(prefix="tansa-ab-")
    stdin = None
    if args.workload == "sqlite":
        sqlite = shutil.which("sqlite3") or sys.exit("sqlite3 is not installed")
        cmd, stdin = [sqlite, ":memory:"], os.path.join(ROOT, "bench", "sqlite.sql")
    elif args.workload == "storm":
        exe = os.path.join(work, "storm")
        subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", exe, os.path.join(ROOT, "bench", "storm.c")], check=True)
        cmd = [exe]
    elif args.workload == "build":
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from procs import make_build
        build = make_build(work, 60)
        cmd = ["make", "-s", "-C", build, "-j2"]
    else:
        exe = os.path.join(work, "threadchurn")
        src = os.path.join(ROOT, "crates", "tansa-cli", "tests", "programs", "threadchurn.c")
        subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", exe, src], check=True)
        cmd = [exe, "20000", "8"]
    out = os.path.join(work, "r.tansa")
    names = ["plain"] + args.agents
    times = {n: [] for n in names}
    for _ in range(args.rounds):
        for n in names:
            env = dict(os.environ)
            full = cmd
            if n != "plain":
                env["TANSA_AGENT"] = os.path.abspath(n)
                full = [tansa, "record", "-o", out, "--"] + cmd
                if os.path.exists(out):
                    os.remove(out)
            if args.workload == "build":
                subprocess.run(["make", "-s", "-C", build, "clean"], check=True)
            with open(stdin) if stdin else open(os.devnull) as inp:
                t0 = time.perf_counter()
                subprocess.run(full, stdin=inp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env, check=True)
                times[n].append(time.perf_counter() - t0)
    plain = statistics.median(times["plain"])
    print(f"{args.workload}: {args.rounds} alternating rounds")
    print(f"{'':40s} {'median':>8s} {'ratio':>6s} {'mean':>8s} {'slowest':>8s}")
    for n in names:
        m = statistics.median(times[n])
        print(f"{n:40s} {m:7.3f}s {m / plain:5.2f}x {statistics.mean(times[n]):7.3f}s "
              f"{max(times[n]):7.3f}s")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
