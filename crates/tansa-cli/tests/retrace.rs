//! `tansa retrace` end to end: the real binary records a C program built at test time and
//! reports on it; bad input gives a clear message and a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tansa() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tansa"))
}

/// Builds `tansa-ptrace/tests/programs/region.c` (flags recorded in the source).
fn build_region(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tansa-ptrace/tests/programs/region.c");
    tansa_testkit::build(&src, dir, &["-O1", "-g", "-fno-inline"])
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

#[test]
fn not_a_retrace_recording() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.tansa");
    std::fs::write(&p, b"definitely not a recording").unwrap();
    let o = tansa().arg("retrace").arg(&p).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("not a tansa recording"), "{}", text(&o));
}
