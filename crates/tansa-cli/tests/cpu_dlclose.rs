//! `tansa sample` charges each sample to the library that was mapped when it was taken,
//! when a program unloads a library and loads another at the same address, many times
//! within one reading round: records and samples are handled in time order across the
//! CPUs' rings. A program built here loads `liba.so` and `libb.so` in turn at one address
//! (`dlopen`, a busy loop, `dlclose`) and measures its own CPU time in each
//! (`CLOCK_PROCESS_CPUTIME_ID` around each call); tansa's split must match it, and no
//! sample may be named from the other library's code.

mod common;

use std::path::Path;
use std::process::Command;

use common::{compile, stderr, tansa};
use serde_json::Value;

/// `liba.so`: its loop first, then padding; `libb.so`: padding first, then its loop. The
/// two have the same size (so each is loaded where the other was) and their loops lie at
/// different offsets: a sample of one read with the other's mapping lands in the other's
/// padding (`a_pad`, `b_pad`), which never runs. Built with `-g -O1 -shared -fPIC`.
const LIBA: &str = r#"
volatile unsigned long sink_a;
__attribute__((noinline)) void a_work(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink_a += i;
}
void fa(unsigned long n) { a_work(n); }
__attribute__((noinline, used)) void a_pad(void) { __asm__ volatile(".skip 8192, 0x90"); }
"#;
const LIBB: &str = r#"
volatile unsigned long sink_b;
__attribute__((noinline, used)) void b_pad(void) { __asm__ volatile(".skip 8192, 0x90"); }
__attribute__((noinline)) void b_work(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink_b += i;
}
void fb(unsigned long n) { b_work(n); }
"#;

/// `ROUNDS` times: load `liba.so`, call `fa(A)`, unload; load `libb.so`, call `fb(3 A)`,
/// unload. Prints the CPU time spent in each call summed per library, and whether every
/// load was at the address of the first (`dladdr`). Built with `-g -O1 -ldl`.
const MAIN: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
static double call(const char *lib, const char *fn, unsigned long n, void **base) {
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(2); }
    void (*f)(unsigned long) = (void (*)(unsigned long))dlsym(h, fn);
    Dl_info info;
    if (!f || !dladdr((void *)f, &info)) exit(3);
    *base = info.dli_fbase;
    double t0 = cpu();
    f(n);
    double spent = cpu() - t0;
    dlclose(h);
    return spent;
}
int main(int argc, char **argv) {
    int rounds = atoi(argv[3]);
    unsigned long n = strtoul(argv[4], 0, 10);
    double ta = 0, tb = 0;
    void *first = 0, *base = 0;
    int same = 1;
    for (int r = 0; r < rounds; r++) {
        ta += call(argv[1], "fa", n, &base);
        if (!first) first = base;
        same &= base == first;
        tb += call(argv[2], "fb", 3 * n, &base);
        same &= base == first;
    }
    printf("%.0f %.0f %d\n", ta, tb, same);
    return 0;
}
"#;

fn build(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let (la, lb, main) = (
        write("la.c", LIBA),
        write("lb.c", LIBB),
        write("dl.c", MAIN),
    );
    let liba = dir.join("liba.so");
    let libb = dir.join("libb.so");
    let prog = dir.join("dlswap");
    compile(&liba, &[la], &["-g", "-O1", "-shared", "-fPIC"]);
    compile(&libb, &[lb], &["-g", "-O1", "-shared", "-fPIC"]);
    compile(&prog, &[main], &["-g", "-O1", "-ldl"]);
    (prog, liba, libb)
}

/// Samples `prog liba libb ROUNDS N` with `tansa sample [source] -o FILE`: the recording,
/// and the CPU time the program measured in each library. The libraries must have been
/// loaded at one address.
fn sample_swaps(
    dir: &Path,
    source: &[&str],
    rounds: &str,
    n: &str,
) -> (std::path::PathBuf, f64, f64) {
    let (prog, liba, libb) = build(dir);
    let file = dir.join("dl.tansa");
    let out = Command::new(tansa())
        .arg("sample")
        .args(source)
        .args(["-o", file.to_str().unwrap(), "--"])
        .args([&prog, &liba, &libb])
        .args([rounds, n])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let truth = String::from_utf8_lossy(&out.stdout).into_owned();
    let fields: Vec<f64> = truth
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(
        fields[2], 1.0,
        "the libraries were not loaded at one address: the test shows nothing"
    );
    (file, fields[0], fields[1])
}

fn report(file: &Path, by: &str) -> Value {
    common::report_json(file, &["--by", by])
}

fn self_samples(r: &Value, unit: &str) -> u64 {
    r["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["unit"] == unit)
        .map(|u| u["self_samples"].as_u64().unwrap())
        .sum()
}

#[test]
fn samples_go_to_the_library_mapped_when_they_were_taken() {
    let dir = tempfile::tempdir().unwrap();
    // 100 rounds of about 2 + 7 ms: a reading round (up to 100 ms) sees several swaps.
    let (file, ta, tb) = sample_swaps(dir.path(), &[], "100", "8000000");

    let libs = report(&file, "library");
    let (a, b) = (
        self_samples(&libs, "liba.so"),
        self_samples(&libs, "libb.so"),
    );
    let n = a + b;
    let truth_a = ta / (ta + tb);
    let seen_a = a as f64 / n as f64;
    // Each sample lands in one library or the other: four binomial standard deviations
    // of the share over `n` samples (cpu-clock samples every period of CPU time, so the
    // real spread is smaller), plus a point for the calls' entry and exit.
    let tolerance = 4.0 * (truth_a * (1.0 - truth_a) / n as f64).sqrt() + 0.01;
    assert!(
        n >= 400 && (seen_a - truth_a).abs() <= tolerance,
        "liba.so: {a} of {n} samples ({:.1} %), the program measured {:.1} % \
         (tolerance {:.1} points)",
        seen_a * 100.0,
        truth_a * 100.0,
        tolerance * 100.0
    );

    // No sample of one library named from the other's code: the padding never runs (a
    // sample of the other library's loop read with this one's mapping lands there), and
    // besides the loops and their callers only the code the loader runs at load and
    // unload (`_init`, `_fini`, the C runtime's constructor and destructor helpers) may
    // have samples.
    let functions = report(&file, "function");
    let ran = [
        "a_work",
        "fa",
        "b_work",
        "fb",
        "_init",
        "_fini",
        "frame_dummy",
        "__do_global_dtors_aux",
        "register_tm_clones",
        "deregister_tm_clones",
    ];
    for u in functions["units"].as_array().unwrap() {
        let name = u["unit"].as_str().unwrap_or_default();
        let samples = u["self_samples"].as_u64().unwrap_or(0);
        let Some(function) = name
            .strip_prefix("liba.so!")
            .or_else(|| name.strip_prefix("libb.so!"))
        else {
            continue;
        };
        assert!(
            ran.contains(&function) || samples == 0,
            "{name}: {samples} samples of the other library's code"
        );
    }
    for f in ["liba.so!a_work", "libb.so!b_work"] {
        let out = Command::new(tansa())
            .args(["annotate", file.to_str().unwrap(), f])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(
            !listing.contains("fall between instruction starts"),
            "{f}: {listing}"
        );
    }
}

/// `dlopen(argv[1])`, then `fa(argv[2])`: a library loaded at run time that computes
/// without allocating, never unloaded. Built with `-g -O1 -ldl`.
const ONCE: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    void (*f)(unsigned long) = (void (*)(unsigned long))dlsym(h, "fa");
    if (!f) return 3;
    f(strtoul(argv[2], 0, 10));
    return 0;
}
"#;

/// Under the agent's sampler (`--source agent`, where perf is refused), the agent learns of
/// a library the program loaded only when one of its hooks runs: a library that computes
/// without allocating was `[jit PID]!??`, every sample of it. The collector now reads the
/// process's mappings when a sample's stack runs through code no announced module covers.
/// (A library unloaded, and another loaded in its place, before the collector reads the
/// first sample's stack is not told apart: cpu.md says so. Here it stays loaded.)
#[test]
fn under_the_agent_a_library_that_never_allocates_is_named() {
    common::ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    let (_, liba, _) = build(dir.path());
    let main = dir.path().join("once.c");
    std::fs::write(&main, ONCE).unwrap();
    let prog = dir.path().join("once");
    compile(&prog, &[main], &["-g", "-O1", "-ldl"]);
    let file = dir.path().join("agent.tansa");
    // About half a second in the library: many collector ticks.
    let out = Command::new(tansa())
        .args([
            "sample",
            "--source",
            "agent",
            "-o",
            file.to_str().unwrap(),
            "--",
        ])
        .arg(&prog)
        .arg(&liba)
        .arg("500000000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let libs = report(&file, "library");
    let total = libs["total_samples"].as_u64().unwrap();
    let a = self_samples(&libs, "liba.so");
    let generated: u64 = libs["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["unit"].as_str().unwrap_or_default().starts_with("[jit"))
        .map(|u| u["self_samples"].as_u64().unwrap())
        .sum();
    assert!(total >= 50, "{total} samples: {libs:#}");
    // A stack read within 20 ms of an earlier read of the mappings waits for a later one.
    assert!(
        generated * 100 <= total * 5 && a * 100 >= total * 90,
        "liba.so {a}, generated code {generated}, of {total} samples: {libs:#}"
    );
}
