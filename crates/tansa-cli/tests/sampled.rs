//! Sampled heap mode (`tansa record --sample-rate BYTES`): a program with known allocation
//! volumes per library (`programs/sampled_main.c`, `programs/sampled_lib.c`, built at -O0 so
//! that no allocation is optimised away) is recorded in full and sampled, and the sampled
//! estimates must fall within the documented error bound of the exact figures.
//!
//! The bound: allocations are sampled as a Poisson process over bytes with mean `R` bytes
//! between samples, so a figure of `B` bytes made of blocks much smaller than `R` is
//! estimated from about `B / R` samples, with a relative standard deviation of
//! `sqrt(R / B)`. The tests allow four standard deviations (a false failure about once in
//! 15,000 comparisons). Blocks larger than `R` are sampled for sure and counted exactly.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

const RATE: u64 = 16 * 1024;

fn program() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = build_dir().join("sampled");
        std::fs::create_dir_all(&dir).unwrap();
        compile(
            &dir.join("libsampled.so"),
            &[source("sampled_lib.c")],
            &["-shared", "-fPIC", "-g", "-O0"],
        );
        let exe = dir.join("sampled_main");
        let ldir = format!("-L{}", dir.display());
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        compile(
            &exe,
            &[source("sampled_main.c")],
            &["-g", "-O0", &ldir, "-lsampled", &rpath],
        );
        exe
    })
    .clone()
}

fn recorded(extra: &[&str], name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    let out = record(&file, extra, &[program().to_str().unwrap()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (dir, file)
}

fn figure(report: &Value, unit_name: &str, field: &str) -> f64 {
    unit(report, unit_name)[field].as_i64().unwrap() as f64
}

/// Whether `estimate` is within four standard deviations of `exact` bytes at `RATE`.
fn within_bound(estimate: f64, exact: f64) -> bool {
    let sd = (RATE as f64 / exact).sqrt() * exact;
    (estimate - exact).abs() <= 4.0 * sd
}

#[test]
fn sampled_estimates_fall_within_the_documented_bound() {
    let (_a, full) = recorded(&[], "full.tansa");
    let (_b, sampled) = recorded(&["--sample-rate", "16KiB"], "sampled.tansa");
    let exact = report_json(&full, &[]);
    let est = report_json(&sampled, &[]);
    assert_eq!(est["sample_rate_bytes"], RATE, "{est}");
    assert!(exact.get("sample_rate_bytes").is_none());

    // The exact figures are the program's (see sampled_main.c).
    let lib = "libsampled.so";
    let exe = "sampled_main";
    assert_eq!(figure(&exact, lib, "net_bytes"), 8.0 * 1024.0 * 1024.0);
    assert_eq!(figure(&exact, exe, "net_bytes"), 4.0 * 1024.0 * 1024.0);

    for (u, field) in [
        (lib, "allocated_bytes"),
        (lib, "net_bytes"),
        (lib, "max_bytes"),
        (exe, "allocated_bytes"),
    ] {
        let (e, x) = (figure(&est, u, field), figure(&exact, u, field));
        assert!(
            within_bound(e, x),
            "{u} {field}: estimate {e} against {x} (bound {:.0})",
            4.0 * (RATE as f64 / x).sqrt() * x
        );
    }
    // Calls: the executable's 100-byte mallocs, estimated like bytes.
    let calls = |r: &Value| unit(r, exe)["calls"]["malloc"].as_f64().unwrap();
    let (e, x) = (calls(&est), calls(&exact));
    let sd = (RATE as f64 / (x * 100.0)).sqrt() * x;
    assert!((e - x).abs() <= 4.0 * sd, "malloc calls: {e} against {x}");
    // The executable frees all its small blocks and keeps one block larger than any
    // sampling interval: its net is exact.
    assert_eq!(figure(&est, exe, "net_bytes"), 4.0 * 1024.0 * 1024.0);

    // Far fewer events were recorded.
    let events = |r: &Value| r["events"].as_u64().unwrap();
    assert!(
        events(&est) * 10 < events(&exact),
        "{} sampled events against {}",
        events(&est),
        events(&exact)
    );

    // The table says the figures are estimates and gives the rate.
    let out = run_tansa(&["report", sampled.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sampled: figures are estimates from allocations sampled every 16.0 KiB"),
        "{text}"
    );
    // Stack profiles carry the same estimates.
    let folded = run_tansa(&[
        "export",
        sampled.to_str().unwrap(),
        "--format",
        "collapsed",
        "--weight",
        "allocated",
        "-o",
        "-",
    ]);
    assert!(folded.status.success(), "{}", stderr(&folded));
    let sum: i64 = String::from_utf8_lossy(&folded.stdout)
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(sum, est["totals"]["allocated_bytes"].as_i64().unwrap());
    // Comparing it with the exact recording says that the rates differ.
    let d = run_tansa(&[
        "diff",
        full.to_str().unwrap(),
        sampled.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(d.status.success(), "{}", stderr(&d));
    let d: Value = serde_json::from_slice(&d.stdout).unwrap();
    assert!(
        d["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("the recordings were made at different sampling rates (A: exact, B: sampled every 16384 bytes)")),
        "{d}"
    );
    // The leak report says its counts are of the sampled allocations.
    let l = run_tansa(&["leaks", sampled.to_str().unwrap(), "--format", "json"]);
    assert!(l.status.success(), "{}", stderr(&l));
    let l: Value = serde_json::from_slice(&l.stdout).unwrap();
    assert!(
        l["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("the recording is sampled")),
        "{l}"
    );
    // So does the HTML page (its data; the page shows it in its summary).
    let page = run_tansa(&["html", sampled.to_str().unwrap(), "-o", "-"]);
    assert!(page.status.success(), "{}", stderr(&page));
    assert!(
        String::from_utf8_lossy(&page.stdout).contains("\"sample_rate_bytes\":16384"),
        "the page's data carries the rate"
    );
}

#[test]
fn sample_rate_is_checked_where_it_is_given() {
    let exe = program();
    let exe = exe.to_str().unwrap();
    for (args, what) in [
        (vec!["record", "--sample-rate", "0", "--", exe], "zero"),
        (
            vec!["record", "--sample-rate", "lots", "--", exe],
            "not a size",
        ),
        (
            vec!["record", "--sample-rate", "512KiB", "--online", "--", exe],
            "with --online",
        ),
        (
            vec![
                "record",
                "--sample-rate",
                "512KiB",
                "--leak-cause",
                "--",
                exe,
            ],
            "with --leak-cause",
        ),
    ] {
        let out = run_tansa(&args);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
    }
}
