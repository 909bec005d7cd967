//! `tansa retrace` end to end: the real binary records a C program built at test time and
//! reports on it; bad input gives a clear message and a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tansa() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tansa"))
}

/// Builds `tansa-ptrace/tests/programs/region.c` (flags recorded in the source).
fn build_region(dir: &Path) -> PathBuf {
    build_program(dir, "region")
}

/// Builds `tansa-ptrace/tests/programs/<name>.c` (flags recorded in the source).
fn build_program(dir: &Path, name: &str) -> PathBuf {
    build_with(dir, name, &[])
}

/// [`build_program`] with further compiler flags.
fn build_with(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tansa-ptrace/tests/programs/{name}.c"));
    let mut flags = vec!["-O1", "-g", "-fno-inline"];
    flags.extend_from_slice(extra);
    tansa_testkit::build(&src, dir, &flags)
}

/// Records `exe runs` with the ptrace sampler at `period`, with ground truth.
fn record_ptrace(dir: &Path, exe: &Path, period: u64, executions: u64, runs: &str) -> PathBuf {
    let file = dir.join(format!("p{period}.tansa"));
    let o = tansa()
        .args([
            "retrace", "record", "--region", "work", "--source", "ptrace",
        ])
        .args(["--period", &period.to_string()])
        .args(["--executions", &executions.to_string()])
        .args(["--ground-truth", "-o"])
        .arg(&file)
        .arg("--")
        .arg(exe)
        .arg(runs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    file
}

/// `tansa retrace FILE --format json ARGS..`, parsed.
fn report_json(file: &Path, args: &[&str]) -> serde_json::Value {
    let o = tansa()
        .arg("retrace")
        .arg(file)
        .args(["--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn records_and_reports_json_with_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_region(dir.path());
    let file = dir.path().join("r.tansa");
    let o = tansa()
        .args([
            "retrace",
            "record",
            "--region",
            "work",
            "--period",
            "7",
            "--executions",
            "300",
        ])
        .args(["--ground-truth", "-o"])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .arg("1000")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("sampled 300 execution(s) of `work`"),
        "{}",
        text(&o)
    );

    let o = tansa()
        .arg("retrace")
        .arg(&file)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "tansa.retrace.v1");
    assert_eq!(v["region"], "work");
    assert_eq!(v["period"], 7);
    assert_eq!(v["executions"], 300);
    // This machine has no PMU, so auto falls back to ptrace; a machine with one samples
    // with the hardware counter. Either way the report says which.
    let source = v["source"].as_str().unwrap();
    assert!(source == "ptrace" || source == "instructions", "{source}");
    let lcs = v["accuracy"]["lcs_ratio"].as_f64().unwrap();
    let ed = v["accuracy"]["edit_distance"].as_f64().unwrap();
    if source == "ptrace" {
        assert!(lcs >= 0.95, "LCS ratio {lcs}");
        assert!(ed <= 0.05, "edit distance {ed}");
    }
    let trace = v["trace"].as_array().unwrap();
    assert_eq!(
        trace.len() as u64,
        v["accuracy"]["rebuilt_length"].as_u64().unwrap()
    );
    assert_eq!(trace[0]["function"], "work");
    assert_eq!(trace[0]["index"], 0);
    assert_eq!(trace[0]["block"], 1);
    assert!(trace[0]["file"].as_str().unwrap().ends_with("region.c"));
    assert!(trace[0]["mnemonic"].as_str().is_some());
    assert!(trace.iter().all(|e| e["support"].as_u64().unwrap() >= 1));

    // The text report, with runs collapsed, and the function variant.
    let o = tansa()
        .arg("retrace")
        .arg(&file)
        .args(["--variant", "function"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("region `work`"), "{out}");
    assert!(
        out.contains("accuracy against the ground truth: LCS ratio"),
        "{out}"
    );
    assert!(out.contains("runs"), "{out}");
}

#[test]
fn unknown_region_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_region(dir.path());
    let o = tansa()
        .args(["retrace", "record", "--region", "wrok", "-o"])
        .arg(dir.path().join("x.tansa"))
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("no function `wrok`"), "{t}");
    assert!(t.contains("close matches: work"), "{t}");
    assert!(!dir.path().join("x.tansa").exists());
}

#[test]
fn target_exiting_before_the_region_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_region(dir.path());
    let o = tansa()
        .args(["retrace", "record", "--region", "work", "-o"])
        .arg(dir.path().join("x.tansa"))
        .arg("--")
        .arg(&exe)
        .arg("0")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("the target exited with code 0 before `work` ran"),
        "{t}"
    );
}

/// A target that ends before the executions asked for were sampled: `retrace record`
/// exits with its status, as `tansa record` does (it exited 0 whatever the target did);
/// one stopped by the recorder once enough were sampled is a success.
#[test]
fn the_targets_own_status_is_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ends.c");
    std::fs::write(
        &src,
        "#include <signal.h>\n#include <stdlib.h>\n\
         volatile int sink;\n\
         __attribute__((noinline)) int work(int x) { for (int i = 0; i < 20; i++) x += i; return x; }\n\
         int main(int argc, char **argv) {\n\
         \x20   for (int k = 0; k < 200; k++) sink += work(k);\n\
         \x20   if (argv[1][0] == 's') raise(SIGTERM);\n\
         \x20   return atoi(argv[1]);\n\
         }\n",
    )
    .unwrap();
    let exe = dir.path().join("ends");
    tansa_testkit::compile(&exe, &[src], &["-O1", "-g"]);
    for (arg, executions, status) in [("3", "1000", 3), ("s", "1000", 128 + 15), ("3", "50", 0)] {
        let o = tansa()
            .args([
                "retrace",
                "record",
                "--region",
                "work",
                "--executions",
                executions,
            ])
            .arg("-o")
            .arg(dir.path().join(format!("{arg}-{executions}.tansa")))
            .arg("--")
            .arg(&exe)
            .arg(arg)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(status),
            "{arg} {executions}: {}",
            text(&o)
        );
    }
}

/// threads.c runs the region in its main thread, then in three worker threads at once
/// (608 executions in all, four paths of 152 each). Every thread is traced: the program
/// runs to its end with its own output and exit status (a thread that was not traced used
/// to die of SIGTRAP at the region's entry), and every execution but the warm-up (the main
/// thread's first, i = 0) is sampled, in whichever thread it ran, and rebuilt exactly.
#[test]
fn records_the_region_in_every_thread() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_with(dir.path(), "threads", &["-pthread"]);
    let alone = Command::new(&exe).output().unwrap();
    assert!(alone.status.success());
    let file = dir.path().join("t.tansa");
    let o = tansa()
        .args([
            "retrace", "record", "--region", "work", "--source", "ptrace",
        ])
        .args(["--executions", "100000", "--ground-truth", "-o"])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // The target's own output, untouched.
    assert!(o.stdout.starts_with(&alone.stdout), "{t}");
    assert!(
        t.contains("sampled 607 execution(s) of `work` in 4 threads"),
        "{t}"
    );
    assert!(
        t.contains("the target exited with code 0 after 607 of 100000 executions"),
        "{t}"
    );

    let v = report_json(&file, &[]);
    assert_eq!(v["executions"], 607);
    assert_eq!(v["alignment"], "counts", "{}", v["alignment_note"]);
    assert_eq!(v["accuracy"]["distinct_paths"], 4);
    assert_eq!(v["accuracy"]["truth_executions"], 607);
    let paths = v["paths"].as_array().unwrap();
    let executions: Vec<u64> = paths
        .iter()
        .map(|p| p["executions"].as_u64().unwrap())
        .collect();
    assert_eq!(executions, vec![152, 152, 152, 151]);
    for p in paths {
        assert_eq!(p["accuracy"]["lcs_ratio"], 1.0, "{p}");
        assert_eq!(p["accuracy"]["truth_share"], p["share"], "{p}");
        assert_eq!(p["missing"], 0, "{p}");
    }
}

/// dup1.c and dup2.c each define `static long dup(long)`: `--region dup` is refused with
/// both listed as CPU reports name them (`dup@0xSTART`), and each of those names records
/// its own function (it used to take the first silently).
#[test]
fn a_name_of_several_functions_is_refused_with_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let programs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tansa-ptrace/tests/programs");
    let exe = dir.path().join("dup");
    tansa_testkit::compile(
        &exe,
        &[programs.join("dup1.c"), programs.join("dup2.c")],
        &["-O1", "-g", "-fno-inline"],
    );
    let record = |region: &str, file: &Path| {
        tansa()
            .args(["retrace", "record", "--region", region])
            .args(["--executions", "20", "-o"])
            .arg(file)
            .arg("--")
            .arg(&exe)
            .arg("100")
            .output()
            .unwrap()
    };
    let refused = dir.path().join("refused.tansa");
    let o = record("dup", &refused);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(!refused.exists());
    let (_, list) = t
        .split_once("`dup` names several functions in ")
        .and_then(|(_, rest)| rest.split_once("; pick one: "))
        .unwrap_or_else(|| panic!("{t}"));
    let candidates: Vec<&str> = list.trim().split(", ").collect();
    assert_eq!(candidates.len(), 2, "{t}");
    let mut files = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        assert!(c.starts_with("dup@0x"), "{c}");
        let file = dir.path().join(format!("{i}.tansa"));
        let o = record(c, &file);
        assert!(o.status.success(), "{}", text(&o));
        let v = report_json(&file, &[]);
        assert_eq!(v["region"], *c);
        let source = v["trace"][0]["file"].as_str().unwrap();
        files.push(source.rsplit('/').next().unwrap().to_string());
    }
    files.sort();
    assert_eq!(files, ["dup1.c", "dup2.c"]);
}

/// `shfn` is in libshlib.so, which shlib_main calls it from: the error says that regions
/// are looked up in the main executable only, not that the name is unknown (which read
/// like a typo); the help says so too. A function of the executable that calls it works.
#[test]
fn a_region_in_a_shared_library_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let programs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tansa-ptrace/tests/programs");
    let flags = ["-O1", "-g", "-fno-inline"];
    let lib = dir.path().join("libshlib.so");
    let mut lib_flags = flags.to_vec();
    lib_flags.extend(["-shared", "-fPIC"]);
    tansa_testkit::compile(&lib, &[programs.join("shlib.c")], &lib_flags);
    let exe = dir.path().join("shlib_main");
    let lib_dir = format!("-L{}", dir.path().display());
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    let mut exe_flags = flags.to_vec();
    exe_flags.extend([lib_dir.as_str(), "-lshlib", rpath.as_str()]);
    tansa_testkit::compile(&exe, &[programs.join("shlib_main.c")], &exe_flags);
    let record = |region: &str| {
        tansa()
            .args(["retrace", "record", "--region", region])
            .args(["--executions", "20", "-o"])
            .arg(dir.path().join(format!("{region}.tansa")))
            .arg("--")
            .arg(&exe)
            .arg("100")
            .output()
            .unwrap()
    };
    let o = record("shfn");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("`shfn` is in a shared library that"), "{t}");
    assert!(t.contains("main executable only"), "{t}");
    assert!(!t.contains("no function"), "{t}");
    assert!(!dir.path().join("shfn.tansa").exists());

    let o = record("work");
    assert!(o.status.success(), "{}", text(&o));

    let o = tansa()
        .args(["help", "retrace", "record"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("FUNCTION must be in the main executable"),
        "{help}"
    );
}

/// perf_event_open refuses a period with the top bit set: `--period` stops at 2^63 - 1 with
/// a message that says so (2^63 used to fail as "perf_event_open(instructions) failed:
/// Invalid argument", on a machine without a PMU at that), and 2^63 - 1 is taken.
#[test]
fn period_beyond_what_perf_event_open_takes_is_refused_when_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_region(dir.path());
    let record = |period: &str| {
        tansa()
            .args(["retrace", "record", "--region", "work", "--period", period])
            .args(["--executions", "3", "-o"])
            .arg(dir.path().join(format!("{period}.tansa")))
            .arg("--")
            .arg(&exe)
            .arg("10")
            .output()
            .unwrap()
    };
    for period in ["9223372036854775808", "18446744073709551615", "0"] {
        let o = record(period);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{t}");
        assert!(t.contains("the period is 1 to 9223372036854775807"), "{t}");
        assert!(!t.contains("perf_event_open(instructions) failed"), "{t}");
    }
    let o = record("9223372036854775807");
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn not_a_retrace_recording() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.tansa");
    std::fs::write(&p, b"definitely not a recording").unwrap();
    let o = tansa().arg("retrace").arg(&p).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("not a tansa recording"), "{}", text(&o));
}

/// P = 101 on region.c, whose loop body is shorter than the period: the default rebuild
/// places every sample by its position and reaches the true path; the seed's literal
/// similarity merge stays selectable.
#[test]
fn sparse_period_rebuilds_a_loop_shorter_than_the_period() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_region(dir.path());
    let file = record_ptrace(dir.path(), &exe, 101, 300, "400");
    let v = report_json(&file, &[]);
    assert_eq!(v["alignment"], "counts", "{}", v["alignment_note"]);
    let lcs = v["accuracy"]["lcs_ratio"].as_f64().unwrap();
    assert!(lcs >= 0.95, "LCS ratio {lcs} at P = 101");
    assert_eq!(v["accuracy"]["distinct_paths"], 1);
    let paths = v["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 1);
    assert_eq!(paths[0]["share"], 1.0);
    assert_eq!(paths[0]["executions"], 300);
    assert_eq!(paths[0]["trace"], v["trace"]);
    // The premise: an instruction recurs less than P positions later (a loop body shorter
    // than the period), so per-execution partials of ~4 samples are ambiguous.
    let trace = v["trace"].as_array().unwrap();
    let addr = |i: usize| trace[i]["address"].as_u64().unwrap();
    assert!(
        (0..trace.len()).any(|i| (i + 1..trace.len().min(i + 101)).any(|j| addr(j) == addr(i))),
        "region.c's loop body is shorter than 101 instructions"
    );

    let literal = report_json(&file, &["--align", "merge", "--similarity", "literal"]);
    assert_eq!(literal["alignment"], "merge");
    assert_eq!(literal["merge"]["group_similarity"], "literal");
    assert!(literal["merge"]["steps"].as_u64().unwrap() > 0);
    assert_eq!(literal["paths"].as_array().unwrap().len(), 1);
}

/// paths.c takes three paths (half, a quarter, a quarter of the executions; the recorder's
/// warm-up is the first): each is rebuilt on its own at P = 101 and reported with its
/// exact share, which the single-stepped ground truth (the same executions) confirms.
#[test]
fn sparse_period_reports_each_path_with_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_program(dir.path(), "paths");
    let file = record_ptrace(dir.path(), &exe, 101, 400, "1000");
    let v = report_json(&file, &[]);
    assert_eq!(v["alignment"], "counts", "{}", v["alignment_note"]);
    assert_eq!(v["accuracy"]["distinct_paths"], 3);
    let paths = v["paths"].as_array().unwrap();
    let executions: Vec<u64> = paths
        .iter()
        .map(|p| p["executions"].as_u64().unwrap())
        .collect();
    assert_eq!(executions, vec![200, 100, 100]);
    let shares: Vec<f64> = paths.iter().map(|p| p["share"].as_f64().unwrap()).collect();
    assert_eq!(shares, vec![0.5, 0.25, 0.25]);
    for p in paths {
        let a = &p["accuracy"];
        assert!(a["lcs_ratio"].as_f64().unwrap() >= 0.95, "{a}");
        assert_eq!(a["truth_share"], p["share"], "{a}");
        let len = p["instructions"].as_u64().unwrap();
        let listed = p["trace"].as_array().unwrap().len() as u64;
        assert_eq!(listed + p["missing"].as_u64().unwrap(), len);
    }
    let lengths: std::collections::BTreeSet<u64> = paths
        .iter()
        .map(|p| p["instructions"].as_u64().unwrap())
        .collect();
    assert_eq!(lengths.len(), 3, "three paths of different lengths");

    let o = tansa().arg("retrace").arg(&file).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("path 1: 50.0% of executions (200)"), "{out}");
    assert!(out.contains("path 3: 25.0% of executions (100)"), "{out}");
}

/// P = 1009, longer than every path: most executions hold no sample and the others one,
/// yet with enough executions every path is rebuilt from positions and the control-flow
/// graph. With the seed's sampling (`--phase counted`, deterministic) and 750 executions
/// of the two rarer paths, fewer than P, some positions are never sampled and come from
/// the control-flow graph; by default (random phases) each path gets every phase once per
/// P of its executions, so with 1250 each every position is sampled.
#[test]
fn period_longer_than_the_region_with_enough_executions() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_program(dir.path(), "paths");
    let file = dir.path().join("shuffled.tansa");
    let o = tansa()
        .args([
            "retrace", "record", "--region", "work", "--source", "ptrace",
        ])
        .args([
            "--period",
            "1009",
            "--executions",
            "5000",
            "--ground-truth",
            "-o",
        ])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .arg("6000")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v = report_json(&file, &[]);
    assert_eq!(v["sampling_phase"], "shuffled");
    for p in v["paths"].as_array().unwrap() {
        assert_eq!(p["observed"], p["instructions"], "{p}");
        assert_eq!(p["accuracy"]["lcs_ratio"], 1.0, "{p}");
    }
    assert_eq!(v["accuracy"]["weighted_lcs_ratio"], 1.0);

    let file = dir.path().join("counted.tansa");
    let o = tansa()
        .args([
            "retrace", "record", "--region", "work", "--source", "ptrace",
        ])
        .args([
            "--period",
            "1009",
            "--executions",
            "3000",
            "--phase",
            "counted",
        ])
        .args(["--ground-truth", "-o"])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .arg("5000")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v = report_json(&file, &[]);
    assert_eq!(v["alignment"], "counts", "{}", v["alignment_note"]);
    let paths = v["paths"].as_array().unwrap();
    let executions: Vec<u64> = paths
        .iter()
        .map(|p| p["executions"].as_u64().unwrap())
        .collect();
    assert_eq!(executions, vec![1500, 750, 750]);
    for p in paths {
        let a = &p["accuracy"];
        assert!(a["lcs_ratio"].as_f64().unwrap() >= 0.95, "{a}");
    }
    // Some positions were never sampled and came from the control-flow graph.
    assert!(paths.iter().any(|p| p["filled"].as_u64().unwrap() > 0));
}

/// A similarity merge of too few samples says so, and how many executions would do: 20
/// executions of `region.c` (424 instructions each) at period 1009 give some 8 samples,
/// one per address. Ordered by exact positions, the paths count what is missing instead,
/// and there is no warning.
#[test]
fn too_few_samples_for_a_merge_are_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_region(dir.path());
    let file = record_ptrace(dir.path(), &exe, 1009, 20, "100");
    let counts = report_json(&file, &[]);
    assert_eq!(
        counts["warnings"],
        serde_json::json!([]),
        "{}",
        counts["warnings"]
    );
    let merged = report_json(&file, &["--align", "merge"]);
    let warnings = merged["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("too few to put the trace in order")
            && w.contains("of 20 executions")
            && w.contains("tansa retrace record --executions"),
        "{w}"
    );
    let o = tansa()
        .arg("retrace")
        .arg(&file)
        .args(["--align", "merge"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("warning: {w}")), "{}", text(&o));
}

/// Records `exe runs` (region `rec`, 1000 executions, ground truth) with `args`, and
/// returns its JSON and text reports.
fn record_cycle(dir: &Path, exe: &Path, args: &[&str]) -> (serde_json::Value, String) {
    let file = dir.join(format!("cycle{}.tansa", args.join("")));
    let o = tansa()
        .args(["retrace", "record", "--region", "rec", "--source", "ptrace"])
        .args(["--executions", "1000", "--ground-truth"])
        .args(args)
        .arg("-o")
        .arg(&file)
        .arg("--")
        .arg(exe)
        .arg("2000")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = tansa().arg("retrace").arg(&file).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    (
        report_json(&file, &[]),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// The four paths of every true path and their LCS ratios, from a report.
fn true_path_lcs(v: &serde_json::Value) -> Vec<(u64, f64)> {
    v["accuracy"]["true_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["length"].as_u64().unwrap(),
                p["lcs_ratio"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// cycle.c's region takes four paths in turn, of 4, 13, 22 and 31 instructions: 70, a
/// multiple of the default period 7. The seed's sampling (a count running on across
/// executions) samples each path at the same positions every time; by default each
/// execution is sampled from a random phase, and every path is rebuilt exactly.
#[test]
fn paths_whose_lengths_add_up_to_a_multiple_of_the_period_are_all_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_program(dir.path(), "cycle");
    let (v, out) = record_cycle(dir.path(), &exe, &[]);
    assert_eq!(v["period"], 7);
    assert_eq!(v["alignment"], "counts");
    let mut lengths: Vec<u64> = v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["instructions"].as_u64().unwrap())
        .collect();
    lengths.sort_unstable();
    assert_eq!(lengths, [4, 13, 22, 31]);
    for p in v["paths"].as_array().unwrap() {
        assert_eq!(p["executions"], 250, "{p}");
        assert_eq!(p["missing"], 0, "{p}");
        assert_eq!(
            p["observed"], p["instructions"],
            "every position sampled: {p}"
        );
        assert_eq!(p["accuracy"]["lcs_ratio"], 1.0, "{p}");
    }
    let lcs = true_path_lcs(&v);
    assert_eq!(lcs.len(), 4);
    assert!(lcs.iter().all(|&(_, r)| r == 1.0), "{lcs:?}");
    assert_eq!(v["sampling_phase"], "shuffled");
    assert_eq!(v["accuracy"]["weighted_lcs_ratio"], 1.0);
    assert_eq!(v["accuracy"]["weighted_share"], 1.0);
    assert!(
        out.contains(
            "accuracy against the ground truth: LCS ratio 1.0000, edit distance 0.0000, over \
             the true paths weighted by their executions (1000 stepped execution(s), 4 \
             distinct path(s)); every true path rebuilt exactly"
        ),
        "{out}"
    );
    assert!(out.contains("each execution at a random phase"), "{out}");
}

/// With the seed's sampling (`--phase counted`) on the same program three of the four
/// paths are rebuilt with holes, and the first one (the shortest, which no sample hit:
/// the control-flow graph fills it) exactly. The headline must not say 1.0: it weighs
/// every true path by its executions and names the worst; the figure of the first path
/// alone stays in the JSON (`accuracy.lcs_ratio`).
#[test]
fn headline_accuracy_weighs_every_path_by_its_executions() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_program(dir.path(), "cycle");
    let (v, out) = record_cycle(dir.path(), &exe, &["--phase", "counted"]);
    assert_eq!(v["sampling_phase"], "counted");
    let a = &v["accuracy"];
    assert_eq!(a["lcs_ratio"], 1.0, "the first path, 4 instructions: {a}");
    assert_eq!(a["truth_length"], 4);
    let lcs = true_path_lcs(&v);
    let weighted = a["weighted_lcs_ratio"].as_f64().unwrap();
    let mean = lcs.iter().map(|p| p.1).sum::<f64>() / 4.0;
    assert!((weighted - mean).abs() < 1e-12, "{weighted} vs {lcs:?}");
    assert!(weighted < 0.9, "{weighted}");
    let worst = &a["true_paths"][a["worst_true_path"].as_u64().unwrap() as usize];
    let worst_lcs = worst["lcs_ratio"].as_f64().unwrap();
    assert!(
        lcs.iter().all(|&(_, r)| r >= worst_lcs) && worst_lcs < 0.8,
        "{worst} of {lcs:?}"
    );
    let rebuilt = &v["paths"][worst["rebuilt_path"].as_u64().unwrap() as usize];
    assert_eq!(rebuilt["instructions"], worst["length"]);
    assert!(rebuilt["missing"].as_u64().unwrap() > 0, "{rebuilt}");
    let headline = format!(
        "accuracy against the ground truth: LCS ratio {weighted:.4}, edit distance {:.4}, over \
         the true paths weighted by their executions (1000 stepped execution(s), 4 distinct \
         path(s)); worst: LCS ratio {worst_lcs:.4} for the true path of {} instructions taken \
         by 25.0% of executions (path {} below)",
        a["weighted_edit_distance"].as_f64().unwrap(),
        worst["length"],
        worst["rebuilt_path"].as_u64().unwrap() + 1
    );
    assert!(out.contains(&headline), "{headline}\n{out}");
    assert!(!out.contains("random phase"), "{out}");
}
