//! Golden files of every format, from a simulated session (deterministic: the simulated
//! clock and memory move only as the flow asks). Regenerate with `scripts/bless-golden` (never in CI).

mod common;

use tansa_leaktest::flow::sim::{KIB, Model, Sim};
use tansa_leaktest::plan::Plan;
use tansa_leaktest::report::Report;
use tansa_render::leaktest::{Format, write};

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
    let session = tansa_leaktest::flow::run(&plan, &mut sim, &mut ());
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
    common::check(&format!("leaktest/{name}"), &got);
}

#[test]
fn table() {
    golden("report.txt", Format::Table);
}

#[test]
fn json() {
    golden("report.json", Format::Json);
    let v: serde_json::Value = serde_json::from_str(&render(Format::Json)).unwrap();
    assert_eq!(v["schema"], tansa_leaktest::report::SCHEMA);
}

#[test]
fn junit() {
    golden("report.xml", Format::Junit);
}
