//! Helpers of the `tansa leaktest` end-to-end tests: the test server, plans, running tansa.

#![allow(dead_code)] // Each test binary uses its own part of this module.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Compiler flags of `tests/leaktest/leaky.c` (also in its header comment).
pub const CFLAGS: &[&str] = &["-O1", "-g", "-pthread"];

/// The test server, compiled once per test binary.
pub fn server() -> &'static Path {
    static SERVER: OnceLock<PathBuf> = OnceLock::new();
    SERVER.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/leaktest/leaky.c");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("leaky-{}", std::process::id()));
        tansa_testkit::compile(&out, &[src], CFLAGS);
        out
    })
}

/// A plan from `tests/leaktest/plans/NAME.toml`, with `@SERVER@` and `extra` replacements
/// made, written into a fresh directory (where its commands will run).
pub fn plan(name: &str, extra: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/leaktest/plans/{name}.toml"));
    let mut text = std::fs::read_to_string(&src).expect("plan template");
    text = text.replace("@SERVER@", &server().display().to_string());
    for (from, to) in extra {
        text = text.replace(from, to);
    }
    write_plan(&text)
}

/// Writes `text` as `plan.toml` in a fresh directory.
pub fn write_plan(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, text).expect("write plan");
    (dir, path)
}

/// What `tansa leaktest` did.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tansa leaktest PLAN ARGS...`.
pub fn leaktest(plan: &Path, args: &[&str]) -> Outcome {
    let out = Command::new(env!("CARGO_BIN_EXE_tansa"))
        .arg("leaktest")
        .arg(plan)
        .args(args)
        .output()
        .expect("tansa runs");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `tansa leaktest PLAN --format json` and parses the report.
pub fn report(plan: &Path) -> (i32, serde_json::Value) {
    let o = leaktest(plan, &["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {}\nstdout: {}", o.stderr, o.stdout));
    assert_eq!(v["schema"], "tansa.leaktest-report.v1");
    (o.code, v)
}

/// (item, process, verdict) of every item result.
pub fn verdicts(r: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for item in r["items"].as_array().into_iter().flatten() {
        for res in item["results"].as_array().into_iter().flatten() {
            out.push((
                item["name"].as_str().unwrap_or_default().to_string(),
                res["process"].as_str().unwrap_or_default().to_string(),
                res["verdict"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// The causes of all findings, in order.
pub fn causes(r: &serde_json::Value) -> Vec<String> {
    r["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["cause"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Number of runs.
pub fn runs(r: &serde_json::Value) -> u64 {
    r["summary"]["runs"].as_u64().unwrap_or(u64::MAX)
}

/// Shorthand for an expected verdict.
pub fn v(item: &str, process: &str, verdict: &str) -> (String, String, String) {
    (item.into(), process.into(), verdict.into())
}
