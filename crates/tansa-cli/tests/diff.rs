//! `tansa diff`, end to end: a program that leaks a number of blocks given on its command
//! line through a shared library (tests/programs/diffleak.c, libdiffleak.c, flags in the
//! README there), recorded twice under the real agent with different numbers; the exact
//! byte and call deltas per library and per function; the growth gate's exit status just
//! below and just above the known growth; a CPU diff of two `tansa sample` recordings
//! against their own reports; and bad input (kinds mixed, a missing, foreign or truncated
//! file, options that do not apply).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Mutex, OnceLock};

use common::*;
use serde_json::Value;

/// Bytes of each leaked block (libdiffleak.c).
const BLOCK: i64 = 100;
/// Blocks leaked in A and in B.
const LEAK_A: i64 = 10;
const LEAK_B: i64 = 30;

/// The built `diffleak` (once per test process).
fn diffleak() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    EXE.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = build_dir().join("diff");
        std::fs::create_dir_all(&dir).unwrap();
        compile(
            &dir.join("libdiffleak.so"),
            &[source("libdiffleak.c")],
            &["-shared", "-fPIC", "-g", "-O1"],
        );
        let exe = dir.join("diffleak");
        let ldir = format!("-L{}", dir.display());
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        compile(
            &exe,
            &[source("diffleak.c")],
            &["-g", "-O1", &ldir, "-ldiffleak", &rpath],
        );
        exe
    })
}

/// Records `diffleak N` into `dir/name`.
fn record_leak(dir: &Path, name: &str, n: i64) -> PathBuf {
    let file = dir.join(name);
    let out = record(&file, &[], &[diffleak().to_str().unwrap(), &n.to_string()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    file
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn diff(a: &Path, b: &Path, args: &[&str]) -> Output {
    let mut all = vec!["diff", a.to_str().unwrap(), b.to_str().unwrap()];
    all.extend(args);
    run_tansa(&all)
}

fn diff_json(a: &Path, b: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--format", "json"];
    all.extend(args);
    let out = diff(a, b, &all);
    assert_eq!(code(&out), 0, "tansa diff {args:?}: {}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("diff JSON parses");
    assert_eq!(v["schema"], "tansa.diff.v1");
    v
}

/// The row of `unit` (panics with the rows present if absent).
fn row<'a>(d: &'a Value, unit: &str) -> &'a Value {
    let units = d["units"].as_array().expect("units");
    units.iter().find(|u| u["unit"] == unit).unwrap_or_else(|| {
        let names: Vec<&str> = units.iter().filter_map(|u| u["unit"].as_str()).collect();
        panic!("no unit {unit} in the diff; units: {names:?}")
    })
}

fn i(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// (net, max, allocated, freed, total calls, malloc, free) of a side or delta.
fn figures(f: &Value) -> (i64, i64, i64, i64, i64, i64, i64) {
    (
        i(&f["net_bytes"]),
        i(&f["max_bytes"]),
        i(&f["allocated_bytes"]),
        i(&f["freed_bytes"]),
        i(&f["total_calls"]),
        i(&f["calls"]["malloc"]),
        i(&f["calls"]["free"]),
    )
}

#[test]
fn heap_deltas_per_library_and_function_are_exact_and_gate_on_them() {
    let dir = tempfile::tempdir().unwrap();
    let a = record_leak(dir.path(), "a.tansa", LEAK_A);
    let b = record_leak(dir.path(), "b.tansa", LEAK_B);
    let (leak_a, leak_b) = (LEAK_A * BLOCK, LEAK_B * BLOCK);
    let grown = leak_b - leak_a;
    let extra = LEAK_B - LEAK_A;

    // By library (the default): the library's net, allocated and mallocs grew by the
    // extra blocks; its peak stayed scratch()'s 4096 bytes, allocated before the leak.
    let d = diff_json(&a, &b, &["--metric", "net"]);
    assert_eq!(
        (&d["kind"], &d["by"], &d["metric"]),
        (&"heap".into(), &"library".into(), &"net".into())
    );
    let lib = row(&d, "libdiffleak.so");
    assert_eq!(lib["status"], "changed");
    assert_eq!(
        figures(&lib["a"]),
        (leak_a, 4096, leak_a + 4096, 4096, LEAK_A + 2, LEAK_A + 1, 1)
    );
    assert_eq!(
        figures(&lib["b"]),
        (leak_b, 4096, leak_b + 4096, 4096, LEAK_B + 2, LEAK_B + 1, 1)
    );
    assert_eq!(
        figures(&lib["delta"]),
        (grown, 0, grown, 0, extra, extra, 0)
    );
    let exe = row(&d, "diffleak");
    assert_eq!(exe["status"], "unchanged");
    assert_eq!(figures(&exe["a"]), (0, 1000, 1000, 1000, 2, 1, 1));
    assert_eq!(figures(&exe["delta"]), (0, 0, 0, 0, 0, 0, 0));
    assert_eq!(d["units"].as_array().unwrap().len(), 2, "{}", d["units"]);
    assert_eq!(
        d["units"][0]["unit"], "libdiffleak.so",
        "largest change first"
    );
    assert_eq!(i(&d["totals"]["delta"]["net_bytes"]), grown);
    assert_eq!(i(&d["totals"]["delta"]["total_calls"]), extra);
    assert!(d.get("gate").is_none());

    // By function: leak_blocks holds the growth, its peak too; the rest is unchanged.
    let d = diff_json(&a, &b, &["--by", "function"]);
    assert_eq!(d["metric"], "max", "the default metric");
    assert_eq!(d["units"][0]["unit"], "libdiffleak.so!leak_blocks");
    let leak = row(&d, "libdiffleak.so!leak_blocks");
    assert_eq!(
        figures(&leak["a"]),
        (leak_a, leak_a, leak_a, 0, LEAK_A, LEAK_A, 0)
    );
    assert_eq!(
        figures(&leak["b"]),
        (leak_b, leak_b, leak_b, 0, LEAK_B, LEAK_B, 0)
    );
    assert_eq!(
        figures(&leak["delta"]),
        (grown, grown, grown, 0, extra, extra, 0)
    );
    for (unit, size) in [("libdiffleak.so!scratch", 4096), ("diffleak!steady", 1000)] {
        let u = row(&d, unit);
        assert_eq!(u["status"], "unchanged", "{unit}");
        assert_eq!(figures(&u["b"]), (0, size, size, size, 2, 1, 1), "{unit}");
    }

    // The gate: leak_blocks' peak grew by exactly `grown` bytes, 200% of A's.
    assert_eq!(grown, 2000);
    for (threshold, want) in [
        ("2000", 0),
        ("1999", 1),
        ("2KiB", 0),
        ("1KiB", 1),
        ("200%", 0),
        ("199.9%", 1),
    ] {
        let o = diff(&a, &b, &["--by", "function", "--fail-if-growth", threshold]);
        assert_eq!(
            code(&o),
            want,
            "--fail-if-growth {threshold}: {}",
            stderr(&o)
        );
        let told = stderr(&o).contains("grew by more than")
            && stderr(&o).contains("libdiffleak.so!leak_blocks (+200.0%)");
        assert_eq!(
            told,
            want == 1,
            "--fail-if-growth {threshold}: {}",
            stderr(&o)
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("leak_blocks"),
            "the comparison is written either way"
        );
    }
    // Both thresholds must be crossed.
    let o = diff(
        &a,
        &b,
        &[
            "--by",
            "function",
            "--fail-if-growth",
            "10%",
            "--fail-if-growth",
            "4096",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // By library, the peak did not move: no gate on max, one on net.
    let o = diff(&a, &b, &["--fail-if-growth", "0%"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = diff(
        &a,
        &b,
        &[
            "--metric",
            "net",
            "--fail-if-growth",
            "0%",
            "--format",
            "json",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let crossed = v["gate"]["crossed"].as_array().unwrap();
    assert_eq!(crossed.len(), 1, "{crossed:?}");
    assert_eq!(
        (
            &crossed[0]["unit"],
            i(&crossed[0]["a"]),
            i(&crossed[0]["b"])
        ),
        (&"libdiffleak.so".into(), leak_a, leak_b)
    );
    assert_eq!(crossed[0]["growth_percent"].as_f64(), Some(200.0));
    // The other way round nothing grew.
    let o = diff(&b, &a, &["--by", "function", "--fail-if-growth", "0%"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let d = diff_json(&b, &a, &["--by", "function"]);
    assert_eq!(
        i(&row(&d, "libdiffleak.so!leak_blocks")["delta"]["net_bytes"]),
        -grown
    );

    // The other formats, and --top.
    let o = diff(
        &a,
        &b,
        &["--by", "function", "--format", "csv", "--top", "1"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let csv = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "header, one unit, total: {csv}");
    assert!(
        lines[1].starts_with("libdiffleak.so!leak_blocks,changed,"),
        "{csv}"
    );
    assert!(lines[2].starts_with("(total),total,"), "{csv}");
    let o = diff(&a, &b, &["--by", "function"]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.starts_with("tansa heap diff: by function"), "{text}");
    assert!(
        text.contains("+2.0 KiB") && text.contains("+200.0%"),
        "{text}"
    );
}

/// The gate on bytes lost at exit, per function.
const GATE_ON_LOST: [&str; 6] = [
    "--by",
    "function",
    "--metric",
    "lost",
    "--fail-if-growth",
    "0",
];

/// `--metric lost`: the bytes the leak check at exit found lost, per unit, compared and
/// gated on (`lost_n.c` loses N blocks of 24 bytes, and one of 100 when N > 2). A recording
/// made without the check cannot be compared on it.
#[test]
fn lost_bytes_at_exit_are_compared_and_gated_on() {
    let exe = program("lost_n", "lost_n.c", &["-g", "-O0"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = |name: &str, n: &str, extra: &[&str]| {
        let file = dir.path().join(name);
        let out = record(&file, extra, &[exe.to_str().unwrap(), n]);
        assert!(out.status.success(), "record failed: {}", stderr(&out));
        file
    };
    let a = rec("a.tansa", "1", &["--leak-check"]);
    let b = rec("b.tansa", "3", &["--leak-check"]);
    let d = diff_json(&a, &b, &["--by", "function", "--metric", "lost"]);
    assert_eq!(d["metric"], "lost");
    let lost = |side: &Value| side["lost_at_exit_bytes"].as_i64();
    let some = row(&d, "lost_n!lose_some");
    assert_eq!((lost(&some["a"]), lost(&some["b"])), (Some(24), Some(72)));
    assert_eq!(lost(&some["delta"]), Some(48));
    let more = row(&d, "lost_n!lose_more");
    assert_eq!(more["status"], "added");
    assert_eq!(lost(&more["delta"]), Some(100));
    let keep = row(&d, "lost_n!keep");
    assert_eq!((lost(&keep["a"]), lost(&keep["b"])), (Some(0), Some(0)));
    assert_eq!(
        (lost(&d["totals"]["a"]), lost(&d["totals"]["b"])),
        (Some(24), Some(172))
    );
    // Sorted by the change of bytes lost: the new 100 bytes first.
    assert_eq!(d["units"][0]["unit"], "lost_n!lose_more", "{d:#}");

    // The gate: any unit that lost more than before fails the run.
    let o = diff(&a, &b, &GATE_ON_LOST);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("lost_n!lose_some") && err.contains("lost_n!lose_more"),
        "{err}"
    );
    assert!(!err.contains("lost_n!keep"), "{err}");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("lost A") && text.contains("+100 B"), "{text}");
    // The same run on both sides: nothing grew.
    let o = diff(&b, &b, &GATE_ON_LOST);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // Without the check on one side: a clear usage error.
    let plain = rec("plain.tansa", "3", &[]);
    let o = diff(&a, &plain, &["--metric", "lost"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("B was recorded without it (tansa record --leak-check)"),
        "{}",
        stderr(&o)
    );
    // Other metrics do not carry the figure for recordings made without the check.
    let d = diff_json(&a, &plain, &["--by", "function"]);
    assert!(
        row(&d, "lost_n!lose_some")["b"]
            .get("lost_at_exit_bytes")
            .is_none()
    );
}

/// A side may be a directory: its heap recordings are read as one (a job's per-rank files,
/// `mpiexec ... tansa record -o run1/job-%r.tansa`), and the additive figures are the sums
/// of its recordings. A directory of nothing, or of a CPU recording beside heap ones, is a
/// usage error.
#[test]
fn a_directory_of_recordings_is_one_side() {
    let dir = tempfile::tempdir().unwrap();
    let (side_a, side_b) = (dir.path().join("run1"), dir.path().join("run2"));
    for (side, n) in [(&side_a, LEAK_A), (&side_b, LEAK_B)] {
        std::fs::create_dir(side).unwrap();
        for rank in 0..2 {
            record_leak(side, &format!("job-{rank}.tansa"), n);
        }
    }
    let d = diff_json(&side_a, &side_b, &["--metric", "net"]);
    let lib = row(&d, "libdiffleak.so");
    let additive = |f: &Value| {
        (
            i(&f["net_bytes"]),
            i(&f["allocated_bytes"]),
            i(&f["total_calls"]),
        )
    };
    assert_eq!(
        additive(&lib["a"]),
        (
            2 * LEAK_A * BLOCK,
            2 * (LEAK_A * BLOCK + 4096),
            2 * (LEAK_A + 2)
        )
    );
    assert_eq!(
        additive(&lib["delta"]),
        (
            2 * (LEAK_B - LEAK_A) * BLOCK,
            2 * (LEAK_B - LEAK_A) * BLOCK,
            2 * (LEAK_B - LEAK_A)
        )
    );
    assert_eq!(d["a"]["file"], side_a.to_str().unwrap(), "{d:#}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = diff(&empty, &side_b, &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is a directory without recordings (*.tansa) in it"),
        "{}",
        stderr(&out)
    );
    let cpu = sample(&side_a, "cpu.tansa", "20");
    assert!(cpu.starts_with(&side_a));
    let out = diff(&side_a, &side_b, &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds heap and CPU recordings"),
        "{}",
        stderr(&out)
    );
}

/// The built `cpu_share` program of tests/programs/cpu (as tests/cpu_sample.rs builds it).
fn cpu_share() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    EXE.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = build_dir().join("diff-cpu");
        std::fs::create_dir_all(&dir).unwrap();
        compile(
            &dir.join("libcpushare.so"),
            &[source("cpu/libshare.c")],
            &["-shared", "-fPIC", "-g", "-O1"],
        );
        let exe = dir.join("cpu_share");
        let ldir = format!("-L{}", dir.display());
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        compile(
            &exe,
            &[source("cpu/share.c")],
            &["-g", "-O1", &ldir, "-lcpushare", &rpath],
        );
        exe
    })
}

fn sample(dir: &Path, name: &str, rounds: &str) -> PathBuf {
    let file = dir.join(name);
    let out = run_tansa(&[
        "sample",
        "-o",
        file.to_str().unwrap(),
        "--",
        cpu_share().to_str().unwrap(),
        rounds,
    ]);
    assert!(
        out.status.success(),
        "tansa sample failed: {}",
        stderr(&out)
    );
    file
}

fn cpu_report(file: &Path) -> Value {
    report_json(file, &["--by", "function"])
}

#[test]
fn cpu_diff_matches_both_reports() {
    let dir = tempfile::tempdir().unwrap();
    let a = sample(dir.path(), "a.tansa", "100");
    let b = sample(dir.path(), "b.tansa", "250");
    let (ra, rb) = (cpu_report(&a), cpu_report(&b));
    // A file that is no recording beside a CPU recording is said to be no recording (it
    // was called a heap recording, and the status was that of a misuse).
    let garbage = dir.path().join("garbage.tansa");
    std::fs::write(&garbage, b"not a recording\n").unwrap();
    for (x, y) in [(&a, &garbage), (&garbage, &a)] {
        let o = diff(x, y, &[]);
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("garbage.tansa: not a tansa recording"),
            "{}",
            stderr(&o)
        );
    }
    let d = diff_json(&a, &b, &[]);
    assert_eq!(
        (&d["kind"], &d["by"], &d["metric"]),
        (&"cpu".into(), &"function".into(), &"self".into())
    );
    let (ta, tb) = (i(&ra["total_samples"]), i(&rb["total_samples"]));
    assert!(ta > 0 && tb > 0);
    assert_eq!(i(&d["a"]["total_samples"]), ta);
    assert_eq!(i(&d["b"]["total_samples"]), tb);
    for (side, total) in [("a", ta), ("b", tb)] {
        assert_eq!(i(&d["totals"][side]["self_samples"]), total);
        assert_eq!(d["totals"][side]["self_percent"].as_f64(), Some(100.0));
    }
    assert_eq!(i(&d["totals"]["delta"]["self_samples"]), tb - ta);
    // Every unit of each report is a row with its own counts and share, and nothing else.
    let units = d["units"].as_array().unwrap();
    for (side, r) in [("a", &ra), ("b", &rb)] {
        let mut sum = 0;
        for u in r["units"].as_array().unwrap() {
            let name = u["unit"].as_str().unwrap();
            let row = row(&d, name);
            let f = &row[side];
            assert_eq!(
                i(&f["self_samples"]),
                i(&u["self_samples"]),
                "{side} {name}"
            );
            assert_eq!(
                i(&f["total_samples"]),
                i(&u["total_samples"]),
                "{side} {name}"
            );
            assert_eq!(f["self_percent"], u["self_percent"], "{side} {name}");
            sum += i(&f["self_samples"]);
        }
        let rows_sum: i64 = units.iter().map(|u| i(&u[side]["self_samples"])).sum();
        assert_eq!(rows_sum, sum, "{side}: no row without a unit of the report");
    }
    for u in units {
        let delta = i(&u["b"]["self_samples"]) - i(&u["a"]["self_samples"]);
        assert_eq!(i(&u["delta"]["self_samples"]), delta, "{u}");
    }
    // The two loops are in both runs.
    for name in ["cpu_share!exe_work", "libcpushare.so!lib_work"] {
        let s = row(&d, name)["status"].as_str().unwrap();
        assert!(s == "changed" || s == "unchanged", "{name}: {s}");
    }
    // Rows by the absolute change of the self share, largest first.
    let changes: Vec<f64> = units
        .iter()
        .map(|u| u["delta"]["self_percent"].as_f64().unwrap().abs())
        .collect();
    assert!(changes.windows(2).all(|w| w[0] >= w[1]), "{changes:?}");

    // Options that do not apply to CPU recordings are usage errors, said before reading.
    for args in [
        vec!["--fail-if-growth", "1MiB"],
        vec!["--metric", "net"],
        vec!["--charge", "last"],
        vec!["--by", "call"],
    ] {
        let o = diff(&a, &b, &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // A heap recording against a CPU recording: a usage error naming both.
    let heap = record_leak(dir.path(), "heap.tansa", 1);
    for (x, y) in [(&heap, &a), (&a, &heap)] {
        let o = diff(x, y, &[]);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("a heap recording") && e.contains("a CPU recording"),
            "{e}"
        );
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn bad_input_gets_a_clear_error_and_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let a = record_leak(dir.path(), "a.tansa", LEAK_A);
    let b = record_leak(dir.path(), "b.tansa", LEAK_B);
    let missing = dir.path().join("missing.tansa");
    let garbage = dir.path().join("garbage.tansa");
    std::fs::write(&garbage, b"#!/bin/sh\necho not a recording\n").unwrap();

    // 1: nothing produced.
    for (x, y, says) in [
        (&a, &missing, "cannot open it"),
        (&missing, &b, "cannot open it"),
        (&a, &garbage, "not a tansa recording"),
    ] {
        let o = diff(x, y, &[]);
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.starts_with("tansa: error: ") && e.contains(says), "{e}");
        assert!(o.stdout.is_empty());
    }

    // 2: misuse.
    for args in [
        vec!["--by", "line"],
        vec!["--metric", "self"],
        vec!["--fail-if-growth", "ten%"],
        vec!["--fail-if-growth", "-5%"],
        vec!["--fail-if-growth", "10%", "--fail-if-growth", "20%"],
        vec!["--pid", "4194303"],
        vec!["--pid", "1,x"],
    ] {
        let o = diff(&a, &b, &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}");
    }

    // 3: a truncated recording is compared up to the damage, with its warning.
    let bytes = std::fs::read(&b).unwrap();
    let cut = dir.path().join("cut.tansa");
    std::fs::write(&cut, &bytes[..bytes.len() * 7 / 10]).unwrap();
    let o = diff(&a, &cut, &["--by", "function"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("tansa heap diff"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let e = stderr(&o);
    let prefix = format!("tansa: warning: {}: ", cut.display());
    assert!(e.lines().any(|l| l.starts_with(&prefix)), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    // Damage wins over growth: the figures are partial.
    let o = diff(&cut, &b, &["--by", "function", "--fail-if-growth", "0%"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));

    // --pid with each side's own process.
    let pid = |f: &Path| report_json(f, &[])["process"]["pid"].as_u64().unwrap();
    let pids = format!("{},{}", pid(&a), pid(&b));
    let d = diff_json(&a, &b, &["--pid", &pids, "--metric", "net"]);
    assert_eq!(i(&row(&d, "libdiffleak.so")["delta"]["net_bytes"]), 2000);
}
