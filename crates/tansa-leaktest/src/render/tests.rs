//! Golden files of every format, from a simulated session (deterministic: the simulated
//! clock and memory move only as the flow asks). Regenerate with `TANSA_BLESS=1`.

use std::path::PathBuf;

use super::*;
use crate::flow::sim::{KIB, Model, Sim};
use crate::plan::Plan;

const PLAN: &str = r#"
[settings]
retest_limit = 5
reading_interval = "1ms"
settle = "0ms"

[[process]]
name = "leaky"
pid = 1
[[process]]
name = "cache"
pid = 2
[[process]]
name = "pool"
pid = 3
[[process]]
name = "erratic"
pid = 4
[[process]]
name = "quiet"
pid = 5

[[item]]
name = "open"
command = "client open {clients}"
[[item.param]]
name = "clients"
default = 2
min = 1
max = 16

[[item]]
name = "more"
command = "client open {clients}"
[[item.param]]
name = "clients"
default = 4
min = 1
max = 16

[idle]
duration = "2s"
interval = "1s"
reading_interval = "10ms"
"#;

fn report() -> Report {
    let plan = Plan::parse(PLAN).unwrap();
    let mut sim = Sim::new(&[
        ("leaky", Model::Leak(512 * KIB)),
        (
            "cache",
            Model::Cache {
                cap: 2,
                each: 256 * KIB,
            },
        ),
        (
            "pool",
            Model::Pool {
                each: 256 * KIB,
                cap: Some(6),
            },
        ),
        (
            "erratic",
            Model::ErrorEvery {
                every: 2,
                leak: 512 * KIB,
                id: "2498-7766-0011",
            },
        ),
        ("quiet", Model::Flat),
    ]);
    let session = crate::flow::run(&plan, &mut sim, &mut ());
    let mut r = Report::build(&plan, session, Some("plan.toml".into()), 0);
    // The goldens do not change with the version.
    r.tansa_version = "VERSION";
    r
}

fn render(format: Format) -> String {
    let mut out = Vec::new();
    write(&report(), format, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn golden(name: &str, format: Format) {
    let got = render(format);
    assert_eq!(got, render(format), "{name}: two renderings differ");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("TANSA_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (regenerate with TANSA_BLESS=1)", path.display()));
    assert!(
        got == want,
        "{name} differs from {} (regenerate with TANSA_BLESS=1 if the change is intended):\n{got}",
        path.display()
    );
}

#[test]
fn table() {
    golden("report.txt", Format::Table);
}

#[test]
fn json() {
    golden("report.json", Format::Json);
    let v: serde_json::Value = serde_json::from_str(&render(Format::Json)).unwrap();
    assert_eq!(v["schema"], crate::report::SCHEMA);
}

#[test]
fn junit() {
    golden("report.xml", Format::Junit);
}
