//! `tansa html` and `tansa leaktest --html` end to end: real recordings of real programs,
//! the page loaded in headless Chromium, and the rendered DOM (after the page's scripts
//! ran) checked against what `tansa report --format json` says of the same recording. Each
//! test saves a screenshot in its temporary directory and prints its path.

mod common;
#[path = "leaktest/common.rs"]
mod lt;

use std::path::{Path, PathBuf};

use common::{
    build_dir, compile, program, record, report_json, require, run_tansa, source, stderr, unit,
};
use tansa_testkit::browser::{self, Loaded, errors_element, grouped, table_rows};

/// Chromium, which CI must have (`.ci/install-deps`); elsewhere the test says it did not
/// run.
fn chromium() -> Option<PathBuf> {
    let c = browser::chromium();
    require(c.is_some(), "chromium is installed (.ci/install-deps)").then_some(c?)
}

/// Where screenshots are kept after the test (the test's own directory is removed).
fn keep_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Loads `page` (with `#fragment`), checks that it rendered without a script error, and
/// returns the DOM.
fn load(chromium: &Path, page: &Path, fragment: Option<&str>) -> String {
    let Loaded {
        dom,
        console_errors,
    } = browser::load(chromium, page, fragment);
    assert!(
        dom.contains("data-rendered=\"1\""),
        "the page's script did not finish: {}",
        &dom[..dom.len().min(2000)]
    );
    assert_eq!(errors_element(&dom), Some(""), "script errors on the page");
    assert!(
        console_errors.is_empty(),
        "console errors: {console_errors:?}"
    );
    dom
}

/// A screenshot of `page`, kept (its path printed).
fn screenshot(chromium: &Path, page: &Path, name: &str) {
    let png = page.with_extension("png");
    browser::screenshot(chromium, page, &png);
    let kept = keep_dir().join(format!("{name}.png"));
    std::fs::copy(&png, &kept).unwrap();
    println!("screenshot: {} (kept as {})", png.display(), kept.display());
}

/// Runs `tansa html ARGS`, which must succeed.
fn html(args: &[&str]) {
    let mut a = vec!["html"];
    a.extend(args);
    let out = run_tansa(&a);
    assert!(out.status.success(), "tansa html failed: {}", stderr(&out));
}

/// The row of `rows` whose first cell is `name`.
fn row<'a>(rows: &'a [Vec<String>], name: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r.first().is_some_and(|c| c == name))
        .unwrap_or_else(|| panic!("no row {name:?} in {rows:?}"))
}

/// An attribute of the `<body>` element.
fn body_attr(dom: &str, name: &str) -> String {
    let body = &dom[dom.find("<body").unwrap()..];
    let body = &body[..body.find('>').unwrap()];
    let at = body
        .find(&format!("{name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {body}"));
    let v = &body[at + name.len() + 2..];
    v[..v.find('"').unwrap()].to_string()
}

fn heap_program() -> PathBuf {
    let dir = build_dir().join("html");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libhtmlalloc.so");
    compile(
        &lib,
        &[source("libhtmlalloc.c")],
        &["-shared", "-fPIC", "-g", "-O0"],
    );
    let exe = dir.join("html_heap");
    let ldir = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    compile(
        &exe,
        &[source("html_heap.c")],
        &["-g", "-O0", "-pthread", &ldir, "-lhtmlalloc", &rpath],
    );
    exe
}

#[test]
fn heap_page_shows_the_report_figures_and_filters_by_time() {
    let Some(chromium) = chromium() else { return };
    let exe = heap_program();
    let tmp = tempfile::tempdir().unwrap();
    let rec = tmp.path().join("heap.tansa");
    let out = record(&rec, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let page = tmp.path().join("heap.html");
    html(&[rec.to_str().unwrap(), "-o", page.to_str().unwrap()]);

    let by_lib = report_json(&rec, &[]);
    let by_fn = report_json(&rec, &["--by", "function"]);
    let by_thread = report_json(&rec, &["--by", "thread"]);
    let lib = unit(&by_lib, "libhtmlalloc.so");
    assert_eq!(lib["net_bytes"], 100_000, "the program's known figure");

    let dom = load(&chromium, &page, None);
    // Every library, function and thread of the report, with the report's figures.
    for (id, report) in [
        ("by-library", &by_lib),
        ("by-function", &by_fn),
        ("by-thread", &by_thread),
    ] {
        let rows = table_rows(&dom, id);
        for u in report["units"].as_array().unwrap() {
            let r = row(&rows, u["unit"].as_str().unwrap());
            let shown = if id == "by-thread" { &r[2..] } else { &r[1..] };
            let want: Vec<String> = ["net_bytes", "max_bytes", "allocated_bytes", "freed_bytes"]
                .iter()
                .map(|f| grouped(u[f].as_i64().unwrap()))
                .collect();
            assert_eq!(&shown[..4], &want[..], "{id}: {u}");
            // The last column: temporary allocations.
            assert_eq!(
                r.last(),
                Some(&grouped(u["temporary_allocations"].as_i64().unwrap())),
                "{id}: {u}"
            );
        }
    }
    assert_eq!(
        row(&table_rows(&dom, "by-function"), "html_heap!html_scratch").last(),
        Some(&"250".to_string()),
        "the program's known temporary allocations"
    );
    assert_eq!(
        row(&table_rows(&dom, "by-library"), "libhtmlalloc.so")[1],
        "100,000"
    );
    // The thread name is text, not markup.
    let main_thread = by_thread["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["unit"].as_str().unwrap().starts_with("</script><b>"))
        .unwrap_or_else(|| panic!("main thread named </script><b>: {by_thread}"));
    row(
        &table_rows(&dom, "by-thread"),
        main_thread["unit"].as_str().unwrap(),
    );
    assert!(dom.contains("&lt;/script&gt;&lt;b&gt; ["));
    // The leak of 777 bytes is a leak site of the program; the totals and peak are in the
    // header.
    let leaks = table_rows(&dom, "leaks");
    assert!(
        leaks
            .iter()
            .any(|r| r[2] == "html_heap" && r[3].contains("html_leak") && r[8] == "777"),
        "{leaks:?}"
    );
    let peak = by_lib["totals"]["max_bytes"].as_i64().unwrap();
    assert!(
        dom.contains(&format!("({} B)", grouped(peak))),
        "peak in bytes"
    );
    // Flame graphs of allocated, never-freed and peak bytes, each in its own frame, the
    // library's frames in them (the frames' scripts ran: no error reached #errors).
    for title in [
        "bytes allocated",
        "bytes never freed (live at the end)",
        "bytes live when the heap peaked",
    ] {
        assert!(
            dom.contains(&format!("<iframe class=\"flame\" title=\"{title}\"")),
            "no flame graph {title}"
        );
    }
    assert!(
        dom.contains("libhtmlalloc.so!html_lib_fill"),
        "library frames in the flame graphs"
    );

    // The first quarter of the time line holds the library's 100,000 bytes, not the leak
    // made 400 ms later.
    let buckets: usize = body_attr(&dom, "data-buckets").parse().unwrap();
    assert!(buckets > 100, "{buckets} buckets");
    let range = format!("range=0-{}", buckets / 4);
    let dom = load(&chromium, &page, Some(&range));
    assert_eq!(body_attr(&dom, "data-range"), format!("0-{}", buckets / 4));
    let rows = table_rows(&dom, "by-function");
    assert_eq!(row(&rows, "libhtmlalloc.so!html_lib_fill")[1], "100,000");
    assert!(
        !rows.iter().any(|r| r[0].contains("html_leak")),
        "the leak is later: {rows:?}"
    );
    let all = table_rows(&load(&chromium, &page, None), "by-function");
    assert_eq!(row(&all, "html_heap!html_leak")[1], "777");
    screenshot(&chromium, &page, "heap");
}

/// A script that runs a leaking program three times: the page listed the same leak site
/// three times, one row per run (`tansa leaks` folds them). Now it shows the site once,
/// with its two repeats and what they still hold, as `tansa leaks` does.
#[test]
fn heap_page_folds_a_leak_site_repeated_by_a_script() {
    let Some(chromium) = chromium() else { return };
    let exe = heap_program();
    let tmp = tempfile::tempdir().unwrap();
    let rec = tmp.path().join("script.tansa");
    let run = format!("{0}; {0}; {0}", exe.display());
    let out = record(&rec, &[], &["/bin/sh", "-c", &run]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let page = tmp.path().join("script.html");
    html(&[rec.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    let dom = load(&chromium, &page, None);
    let leaks = table_rows(&dom, "leaks");
    let rows: Vec<&Vec<String>> = leaks
        .iter()
        .filter(|r| r[3].contains("html_leak"))
        .collect();
    assert_eq!(rows.len(), 1, "{leaks:?}");
    let r = rows[0];
    assert_eq!(r[8], "777", "{r:?}");
    // Ranked, and sorted at first, by what it and its repeats hold.
    assert_eq!(r[9], "2,331", "{r:?}");
    assert_eq!(
        r[11].split(':').next().unwrap().split(" (").next().unwrap(),
        "in 2 more process image(s) of html_heap",
        "{r:?}"
    );
    assert!(r[11].ends_with(": 2 block(s), 1,554 byte(s)"), "{r:?}");
    // The two folded sites are the other runs' (the JSON of `tansa leaks` numbers them).
    let o = run_tansa(&["leaks", rec.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut numbers: Vec<u64> = j["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["site"]["function"]
                .as_str()
                .unwrap()
                .ends_with("!html_leak")
        })
        .map(|s| s["index"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers.len(), 3, "{j}");
    numbers.sort_unstable();
    let listed = format!("(#{}, #{})", numbers[1], numbers[2]);
    assert!(
        r[11].contains(&listed) && r[0] == numbers[0].to_string(),
        "{r:?} {listed}"
    );
    assert!(
        dom.contains("repeat a site listed here"),
        "the page says sites are folded"
    );
}

/// A recording made with the leak check at exit: the page gives Valgrind's leak summary of
/// `lost.c` (tests/leak_check.rs says why each block is lost or not) and each leak site's
/// bytes lost, sorted by them.
#[test]
fn heap_page_shows_the_leak_check_at_exit() {
    let Some(chromium) = chromium() else { return };
    let exe = program("lost", "lost.c", &["-g", "-O0", "-pthread"]);
    let tmp = tempfile::tempdir().unwrap();
    let rec = tmp.path().join("lost.tansa");
    let out = record(&rec, &["--leak-check"], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let page = tmp.path().join("lost.html");
    html(&[rec.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    let dom = load(&chromium, &page, None);
    let check = table_rows(&dom, "leak-check");
    assert_eq!(
        row(&check, "definitely lost")[1..],
        ["205,048", "8"],
        "{check:?}"
    );
    assert_eq!(
        row(&check, "indirectly lost")[1..],
        ["56", "2"],
        "{check:?}"
    );
    assert!(
        dom.contains("205,104 B in 10 block(s)"),
        "the summary gives the bytes lost"
    );
    let sites = table_rows(&dom, "leaks");
    let site = |function: &str| {
        let name = format!("lost!{function} (");
        sites
            .iter()
            .find(|r| r[3].starts_with(&name))
            .unwrap_or_else(|| panic!("no site {function}: {sites:?}"))
    };
    assert_eq!(site("lose_many")[10], "200 (5)", "{sites:?}");
    assert_eq!(site("lose_inner")[10], "24 (1)", "{sites:?}");
    assert_eq!(site("keep_global")[10], "0 (0)", "{sites:?}");
    // Sorted by bytes lost: the 200 KiB block first.
    assert!(sites[0][3].starts_with("lost!lose_big ("), "{sites:?}");
    // Per unit, over the whole recording: bytes (blocks) lost.
    let functions = table_rows(&dom, "by-function");
    let lost = |rows: &[Vec<String>], unit: &str| row(rows, unit).last().unwrap().clone();
    assert_eq!(
        lost(&functions, "lost!lose_big"),
        "204,800 (1)",
        "{functions:?}"
    );
    assert_eq!(
        lost(&functions, "lost!lose_cycle"),
        "64 (2)",
        "{functions:?}"
    );
    assert_eq!(lost(&functions, "lost!keep_big"), "0 (0)", "{functions:?}");
    let libraries = table_rows(&dom, "by-library");
    assert_eq!(lost(&libraries, "lost"), "205,104 (10)", "{libraries:?}");
    // A range that ends before the end does not show them: the check is made at the end.
    let buckets: usize = body_attr(&dom, "data-buckets").parse().unwrap();
    assert!(buckets > 2, "{buckets} buckets");
    let early = load(&chromium, &page, Some(&format!("range=0-{}", buckets - 2)));
    let functions = table_rows(&early, "by-function");
    assert!(
        functions.len() > 5 && functions.iter().all(|r| r.last().unwrap() == "–"),
        "{functions:?}"
    );
    let late = load(
        &chromium,
        &page,
        Some(&format!("range=0-{}", buckets.saturating_sub(1))),
    );
    assert_eq!(
        lost(&table_rows(&late, "by-function"), "lost!lose_big"),
        "204,800 (1)"
    );
    screenshot(&chromium, &page, "heap-leak-check");
}

#[test]
fn cpu_page_shows_the_top_functions_and_their_listing() {
    let Some(chromium) = chromium() else { return };
    let dir = build_dir().join("html");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("htmlspin");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/cpu/htmlspin.c");
    compile(&exe, &[src], &["-g", "-O1"]);
    let tmp = tempfile::tempdir().unwrap();
    let rec = tmp.path().join("cpu.tansa");
    let out = run_tansa(&[
        "sample",
        "-o",
        rec.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "300",
    ]);
    assert!(out.status.success(), "sample failed: {}", stderr(&out));
    // The default name: cpu.html in the current directory, never replacing a file.
    std::fs::write(tmp.path().join("cpu.html"), "taken").unwrap();
    let out = std::process::Command::new(common::tansa())
        .current_dir(tmp.path())
        .args(["html", "cpu.tansa"])
        .output()
        .unwrap();
    assert!(out.status.success(), "tansa html failed: {}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("cpu.html")).unwrap(),
        "taken"
    );
    let page = tmp.path().join("cpu.1.html");
    assert!(stderr(&out).contains("cpu.1.html"), "{}", stderr(&out));

    let by_fn = report_json(&rec, &["--by", "function"]);
    let top = by_fn["units"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|u| u["self_samples"].as_u64())
        .unwrap();
    let name = top["unit"].as_str().unwrap();
    assert!(name.ends_with("!html_hot"), "{name}");
    let dom = load(&chromium, &page, None);
    let rows = table_rows(&dom, "functions");
    let r = row(&rows, name);
    assert_eq!(r[1], grouped(top["self_samples"].as_i64().unwrap()));
    assert_eq!(r[3], grouped(top["total_samples"].as_i64().unwrap()));
    // The split per process, and the listing of the hottest function with its source.
    let by_process = report_json(&rec, &["--by", "process"]);
    let p = &by_process["units"][0];
    let rows = table_rows(&dom, "processes");
    let r = row(&rows, p["unit"].as_str().unwrap());
    assert_eq!(r[2], grouped(p["total_samples"].as_i64().unwrap()));
    assert_eq!(r[4], grouped(p["user_samples"].as_i64().unwrap()));
    assert!(dom.contains(&format!("<h3>{name}</h3>")), "annotated");
    assert!(dom.contains("html_hot(double ms)"), "its source line");
    assert!(
        dom.contains("<iframe class=\"flame\" title=\"samples\"")
            && dom.contains(&format!("{name} (")),
        "a CPU flame graph with the hottest function"
    );
    screenshot(&chromium, &page, "cpu");
}

#[test]
fn leaktest_page_shows_each_verdict_with_its_series() {
    let Some(chromium) = chromium() else { return };
    let (dir, plan) = lt::plan("leak", &[]);
    let json = dir.path().join("report.json");
    let page = dir.path().join("leaktest.html");
    let o = lt::leaktest(
        &plan,
        &[
            "--format",
            "json",
            "-o",
            json.to_str().unwrap(),
            "--html",
            page.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 1, "a fault: {}", o.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let again = dir.path().join("again.html");
    html(&[json.to_str().unwrap(), "-o", again.to_str().unwrap()]);

    for p in [&page, &again] {
        let dom = load(&chromium, p, None);
        let process = &report["processes"][0];
        assert_eq!(process["verdict"], "1-a");
        assert!(dom.contains("data-process=\"srv\""));
        assert!(dom.contains("<span class=\"verdict fault\">1-a</span>"));
        assert!(dom.contains(&browser_text(process["reason"].as_str().unwrap())));
        // The series that decided it, point by point.
        let finding = &report["findings"][0];
        let rows = table_rows(&dom, "processes");
        for (point, r) in finding["series"].as_array().unwrap().iter().zip(&rows) {
            assert_eq!(r[0], point["run"].to_string());
            assert_eq!(r[5], grouped(point["growth"].as_i64().unwrap()), "{r:?}");
        }
        // One chart per judged resource, a mark per run.
        let charts = dom.matches("class=\"series-chart\"").count();
        assert_eq!(
            charts,
            report["settings"]["judge"].as_array().unwrap().len()
        );
        let runs = report["runs"].as_array().unwrap().len();
        assert_eq!(dom.matches("class=\"run\"").count(), runs * charts);
    }
    screenshot(&chromium, &page, "leaktest");
}

/// `s` as the dumped DOM writes text.
fn browser_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[test]
fn wrong_inputs_get_clear_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = tmp.path().join("junk.json");
    std::fs::write(&junk, "{\"schema\": \"something-else\"}").unwrap();
    let out = run_tansa(&["html", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not a tansa leak-test report (schema something-else;"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("Some("), "{}", stderr(&out));
    let out = run_tansa(&["html", junk.to_str().unwrap(), "--charge", "last"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run_tansa(&["html", "/nonexistent/x.tansa"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot open"), "{}", stderr(&out));
}
