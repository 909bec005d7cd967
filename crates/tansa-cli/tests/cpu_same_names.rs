//! Functions of one name in one module (C `static` functions of different files) are told
//! apart on CPU recordings, by their start address: in the report by function (text,
//! JSON), the diff, the flame graph's collapsed stacks and the HTML page, and `tansa
//! annotate` selects each one. The report by line, in CSV too, tells apart the functions
//! of one line. Programs compiled at test time (`tests/programs/cpu/`, flags in
//! `tests/programs/README.md`), sampled for real.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Mutex, OnceLock};

use common::{build_dir, compile, report_json, run_tansa, share_tolerance, stderr};
use serde_json::Value;

fn cpu_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs/cpu")
        .join(name)
}

/// `homonyms`: `homonym_a.c` and `homonym_b.c` each have a `static` `helper`, doing 25 %
/// and 75 % of the work.
fn homonyms() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    P.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = build_dir().join("cpu");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("homonyms");
        compile(
            &exe,
            &[
                cpu_source("homonym_main.c"),
                cpu_source("homonym_a.c"),
                cpu_source("homonym_b.c"),
            ],
            &["-g", "-O1"],
        );
        exe
    })
}

fn sampled(dir: &Path) -> PathBuf {
    let file = dir.join("homonyms.tansa");
    let out = run_tansa(&[
        "sample",
        "-o",
        file.to_str().unwrap(),
        "--",
        homonyms().to_str().unwrap(),
        "200",
    ]);
    assert!(
        out.status.success(),
        "tansa sample failed: {}",
        stderr(&out)
    );
    file
}

fn tansa_ok(args: &[&str]) -> Output {
    let out = run_tansa(args);
    assert!(out.status.success(), "tansa {args:?}: {}", stderr(&out));
    out
}

fn n(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

/// Two `static void helper()` of two files: two rows, each with its own share and caller,
/// named so that `tansa annotate` takes each; the bare name lists both, typeably.
#[test]
fn static_functions_of_one_name_are_two_units_that_annotate_tells_apart() {
    let dir = tempfile::tempdir().unwrap();
    let file = sampled(dir.path());
    let f = file.to_str().unwrap();
    let r = report_json(&file, &["--by", "function"]);
    let units = r["units"].as_array().unwrap();
    let helpers: Vec<&Value> = units
        .iter()
        .filter(|u| u["unit"].as_str().unwrap().starts_with("homonyms!helper"))
        .collect();
    let names: Vec<&str> = helpers
        .iter()
        .map(|u| u["unit"].as_str().unwrap())
        .collect();
    assert_eq!(helpers.len(), 2, "{names:?}");
    assert_ne!(names[0], names[1]);
    // Each is named by its start, which the JSON gives as its address; the function keeps
    // the name the report shows after the module.
    for u in &helpers {
        let address = u["address"].as_str().unwrap();
        assert_eq!(u["unit"], format!("homonyms!helper@{address}"), "{u}");
        assert_eq!(u["function"], format!("helper@{address}"), "{u}");
        assert_eq!(u["module"], "homonyms", "{u}");
    }
    // Told apart by their only caller: file_a's helper does a quarter of the work.
    let called_by = |caller: &str| -> &Value {
        let found: Vec<&&Value> = helpers
            .iter()
            .filter(|u| u["callers"][0]["unit"] == caller)
            .collect();
        assert_eq!(found.len(), 1, "one helper called by {caller}: {helpers:?}");
        found[0]
    };
    let (a, b) = (called_by("homonyms!file_a"), called_by("homonyms!file_b"));
    assert_eq!(a["callers"].as_array().unwrap().len(), 1, "{a}");
    assert_eq!(b["callers"].as_array().unwrap().len(), 1, "{b}");
    let (sa, sb) = (n(a, "self_samples"), n(b, "self_samples"));
    let total = n(&r, "total_samples");
    assert!(
        sa + sb >= total * 9 / 10,
        "the helpers hold the time: {sa} + {sb} of {total}"
    );
    let share = sa as f64 * 100.0 / (sa + sb) as f64;
    let tolerance = share_tolerance(25.0, sa + sb);
    assert!(
        (share - 25.0).abs() <= tolerance,
        "file_a's helper has {share:.1}% of the helpers' samples, expected 25 ± {tolerance:.1} \
         ({sa} vs {sb})"
    );
    let (name_a, name_b) = (a["unit"].as_str().unwrap(), b["unit"].as_str().unwrap());

    // The table shows both rows.
    let out = tansa_ok(&["report", f, "--by", "function"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(name_a) && text.contains(name_b),
        "{name_a}, {name_b}: {text}"
    );

    // annotate takes each name, with or without the module, and lists that function.
    for (name, start) in [(name_a, &a["address"]), (name_b, &b["address"])] {
        let short = name.strip_prefix("homonyms!").unwrap();
        for asked in [name, short] {
            let out = tansa_ok(&["annotate", f, asked, "--asm"]);
            let listing = String::from_utf8_lossy(&out.stdout);
            assert!(listing.starts_with(name), "{asked}: {listing}");
            let start = start.as_str().unwrap();
            assert!(
                listing
                    .lines()
                    .next()
                    .unwrap()
                    .contains(&format!("), {start}..")),
                "{asked}: the listing starts at {start}: {listing}"
            );
        }
    }
    // The bare name and the name with its module are ambiguous: both candidates are
    // listed, each as annotate takes it.
    for asked in ["helper", "homonyms!helper"] {
        let out = run_tansa(&["annotate", f, asked]);
        assert_eq!(out.status.code(), Some(2), "{asked}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("names several functions; pick one: "),
            "{said}"
        );
        let mut listed: Vec<&str> = said
            .trim_end()
            .rsplit_once("pick one: ")
            .unwrap()
            .1
            .split(", ")
            .collect();
        listed.sort_unstable();
        let mut expected = vec![name_a, name_b];
        expected.sort_unstable();
        assert_eq!(listed, expected, "{said}");
    }

    // The diff by function pairs each with itself.
    let out = tansa_ok(&["diff", f, f, "--by", "function", "--format", "json"]);
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, samples) in [(name_a, sa), (name_b, sb)] {
        let row = d["units"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["unit"] == name)
            .unwrap_or_else(|| panic!("no {name} in the diff: {d}"));
        assert_eq!(n(&row["a"], "self_samples"), samples, "{row}");
        assert_eq!(n(&row["b"], "self_samples"), samples, "{row}");
    }

    // Collapsed stacks (what flame graphs are drawn from) keep the two apart.
    let out = tansa_ok(&["export", f, "--format", "collapsed", "-o", "-"]);
    let stacks = String::from_utf8_lossy(&out.stdout);
    let weight = |name: &str, caller: &str| -> u64 {
        stacks
            .lines()
            .filter(|l| l.contains(&format!("{caller};{name} ")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(weight(name_a, "homonyms!file_a"), sa, "{stacks}");
    assert_eq!(weight(name_b, "homonyms!file_b"), sb, "{stacks}");

    // The HTML page names both.
    let page = dir.path().join("homonyms.html");
    tansa_ok(&["html", f, "-o", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(name_a) && html.contains(name_b),
        "{name_a}, {name_b} in the page"
    );
}

/// Two instances of one function template on one line: two rows of `--by line`, which the
/// CSV tells apart by a `function` column, as the table and the JSON do (its rows had
/// one `unit` and nothing else to tell them apart).
#[test]
fn the_csv_by_line_names_the_function_of_each_row() {
    let dir = build_dir().join("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("templates");
    compile(&exe, &[cpu_source("templates.cpp")], &["-g", "-O1"]);
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("templates.tansa");
    let f = file.to_str().unwrap();
    tansa_ok(&["sample", "-o", f, "--", exe.to_str().unwrap()]);
    let r = report_json(&file, &["--by", "line"]);
    let out = tansa_ok(&["report", f, "--by", "line", "--format", "csv"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    assert_eq!(
        header,
        [
            "unit",
            "self_samples",
            "total_samples",
            "self_ns",
            "total_ns",
            "self_percent",
            "total_percent",
            "function"
        ],
        "{text}"
    );
    // Every row of the JSON is a row of the CSV, keyed by (unit, function), once.
    let mut rows = std::collections::HashMap::new();
    for row in csv::Reader::from_reader(text.as_bytes()).records() {
        let row: Vec<String> = row.unwrap().iter().map(str::to_string).collect();
        let key = (row[0].clone(), row[7].clone());
        assert!(
            rows.insert(key.clone(), row).is_none(),
            "{key:?} twice: {text}"
        );
    }
    for u in r["units"].as_array().unwrap() {
        let key = (
            u["unit"].as_str().unwrap().to_string(),
            u["function"].as_str().unwrap().to_string(),
        );
        let row = rows
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} not in the CSV: {text}"));
        assert_eq!(row[1], n(u, "self_samples").to_string(), "{key:?}");
    }
    // The loop line of the template is two rows, one per instance.
    let loop_line = format!("{}:5", cpu_source("templates.cpp").display());
    let mut functions: Vec<&str> = rows
        .keys()
        .filter(|(unit, _)| unit.ends_with("templates.cpp:5"))
        .map(|(_, function)| function.as_str())
        .collect();
    functions.sort_unstable();
    assert_eq!(
        functions,
        [
            "long work<long, char>(long, char)",
            "long work<long, int>(long, int)"
        ],
        "{loop_line}: {text}"
    );
}
