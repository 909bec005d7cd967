#!/usr/bin/env python3
"""The cost of each recorded process (issue 13): `tansa record` of programs that start many
short processes one after another, as a build or a shell script does. Prints figures;
asserts nothing.

    python3 bench/procs.py [--runs N] [--count N] [--skip-build] [--extra PATH-TO-OTHER-TANSA]
                           [--modes fork,exec,build,sample]

Workloads: `fork`, N children that each allocate once and exit, and `exec`, N children that
each run /bin/true (bench/procs/spawn.c); `build`, `make -s -j2` of --sources small C files
(generated), whose compilers allocate on nearly every call through deep and varied stacks,
as builds do; `sample`, the same build under `tansa sample` (CPU sampling, which resolves
the symbols of every compiler's code that it samples, and every instruction of each function
sampled, for annotation). For each, in alternating order within every round: the
plain run, `tansa record`, and with --extra another tansa binary (e.g. a build from before a
change). Medians over --runs rounds of the whole run's wall time, the cost per process
against the plain run, and the recorder's own CPU time (all its threads, read from
/proc/PID/stat while it runs: the collector works beside the program on another CPU, and on a
loaded machine that time is taken from the program).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_build(work, sources):
    """Writes the build workload: `sources` small C files and a Makefile, in WORK/build.
    Returns that directory (`make -s -C DIR -j2` builds it, `make -s -C DIR clean` undoes)."""
    build = os.path.join(work, "build")
    os.mkdir(build)
    for i in range(sources):
        with open(os.path.join(build, f"f{i}.c"), "w") as f:
            f.write("#include <stdio.h>\n#include <stdlib.h>\n"
                    f"int f{i}(int n) {{ char *p = malloc(n); int s = 0;\n"
                    "  for (int i = 0; i < n; i++) s += p[i] = i;\n"
                    "  free(p); printf(\"%d\", s); return s; }\n")
    with open(os.path.join(build, "Makefile"), "w") as f:
        f.write("OBJS = $(patsubst %.c,%.o,$(wildcard *.c))\nall: $(OBJS)\n"
                "%.o: %.c\n\tcc -O2 -c $< -o $@\nclean:\n\trm -f *.o\n")
    return build


def timed(cmd):
    """Runs cmd; returns (wall seconds, CPU seconds of the process itself, not its children)."""
    tick = os.sysconf("SC_CLK_TCK")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu = 0.0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.005)
    wall = time.perf_counter() - t0
    err = p.stderr.read()
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    return wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--count", type=int, default=3000, help="processes per run")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--sources", type=int, default=60, help="C files of the build workload")
    ap.add_argument("--extra", help="another tansa binary to time (its agent must lie beside it)")
    ap.add_argument("--modes", default="fork,exec,build,sample",
                    help="workloads to run, comma-separated (fork, exec, build, sample)")
    args = ap.parse_args()
    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "tansa-cli", "-p", "tansa-agent"],
                       cwd=ROOT, check=True)
    tansa = os.path.join(ROOT, "target", "release", "tansa")
    work = tempfile.mkdtemp(prefix="tansa-procs-")
    spawn = os.path.join(work, "spawn")
    subprocess.run(["cc", "-O1", "-o", spawn, os.path.join(ROOT, "bench", "procs", "spawn.c")], check=True)
    build = make_build(work, args.sources)
    cases = {"plain": None, "tansa": tansa}
    if args.extra:
        cases["extra"] = args.extra
    print(f"{args.count} processes one after another (fork, exec), a build of {args.sources} "
          f"files; medians of {args.runs} rounds")
    print(f"{'workload':8} {'case':6} {'wall':>8} {'per process':>12} {'recorder CPU':>13}")
    print("(for the builds, the ratio to the plain run in place of the cost per process)")
    for mode in args.modes.split(","):
        walls = {c: [] for c in cases}
        cpus = {c: [] for c in cases}
        for _ in range(args.runs):
            for c, binary in cases.items():
                if mode in ("build", "sample"):
                    subprocess.run(["make", "-s", "-C", build, "clean"], check=True)
                    cmd = ["make", "-s", "-C", build, "-j2"]
                else:
                    cmd = [spawn, mode, str(args.count)]
                if binary:
                    out = os.path.join(work, f"{c}.tansa")
                    if os.path.exists(out):
                        os.remove(out)
                    how = "sample" if mode == "sample" else "record"
                    cmd = [binary, how, "-o", out, "--"] + cmd
                wall, cpu = timed(cmd)
                walls[c].append(wall)
                cpus[c].append(cpu)
        plain = statistics.median(walls["plain"])
        for c in cases:
            wall = statistics.median(walls[c])
            if mode in ("build", "sample"):
                per = "" if c == "plain" else f"{wall / plain:.2f}x"
            else:
                per = "" if c == "plain" else f"+{(wall - plain) / args.count * 1e6:.0f} us"
            cpu = "" if c == "plain" else f"{statistics.median(cpus[c]):.2f} s"
            print(f"{mode:8} {c:6} {wall:7.3f}s {per:>12} {cpu:>13}")


if __name__ == "__main__":
    main()
