//! `tansa leaktest` end to end: the real binary against a real test server (compiled from
//! `tests/leaktest/leaky.c`) whose modes produce each phenomenon. Each must get its verdict
//! with the fewest runs the flow allows, and the right exit status.

#[path = "leaktest/common.rs"]
mod common;

use common::{causes, leaktest, plan, report, runs, v, verdicts, write_plan};

/// N in the plans (`retest_limit`).
const N: u64 = 5;

#[test]
fn no_growth_takes_one_run() {
    let (_dir, p) = plan("flat", &[]);
    let (code, r) = report(&p);
    assert_eq!(verdicts(&r), vec![v("get", "srv", "no-growth")]);
    assert_eq!(r["processes"][0]["verdict"], "no-growth");
    assert_eq!(runs(&r), 1);
    assert_eq!(code, 0);
}

#[test]
fn a_steady_leak_is_1a_after_n_runs() {
    let (_dir, p) = plan("leak", &[]);
    let (code, r) = report(&p);
    assert_eq!(verdicts(&r), vec![v("get", "srv", "1-a")]);
    assert_eq!(causes(&r), vec!["continued-growth"]);
    assert_eq!(runs(&r), N);
    // Every point of the series grew by the leak (512 KiB), give or take page tables and
    // the share of pages other processes map too (PSS divides those among them).
    let series = r["findings"][0]["series"].as_array().unwrap();
    assert_eq!(series.len() as u64, N);
    for point in series {
        let g = point["growth"].as_i64().unwrap();
        assert!((480 << 10..600 << 10).contains(&g), "{point}");
    }
    assert_eq!(code, 1);
}

#[test]
fn a_capped_cache_is_1b_as_soon_as_it_stops() {
    let (_dir, p) = plan("cache", &[]);
    let (code, r) = report(&p);
    assert_eq!(verdicts(&r), vec![v("put", "srv", "1-b")]);
    assert_eq!(causes(&r), vec!["growth-stopped"]);
    // Three entries fill the cache; the fourth run shows no growth.
    assert_eq!(runs(&r), 4);
    assert_eq!(r["lists"]["type1"][0]["process"], "srv");
    assert_eq!(code, 0);
}

#[test]
fn a_leak_after_a_logged_error_is_type_2() {
    let (_dir, p) = plan("error", &[]);
    let (code, r) = report(&p);
    assert_eq!(
        verdicts(&r),
        vec![v("login", "srv", "2"), v("logout", "srv", "2")]
    );
    assert_eq!(causes(&r), vec!["log-id-repeated", "log-id-repeated"]);
    assert_eq!(r["findings"][0]["log_ids"][0], "2498-7766-0011");
    assert_eq!(r["lists"]["log_on_increase"].as_array().unwrap().len(), 2);
    // Each item: the initial run grew, the re-test did not; nothing more is needed.
    assert_eq!(runs(&r), 4);
    assert_eq!(code, 1);
}

#[test]
fn errors_written_to_standard_error_count_too() {
    // The server logs to its standard error, which tansa keeps: `[[log]] output = "srv"`.
    let (_dir, p) = plan(
        "error",
        &[
            ("\"--log\", \"srv.log\"", "\"--log\", \"/dev/stderr\""),
            ("file = \"srv.log\"\nprocess = \"srv\"", "output = \"srv\""),
        ],
    );
    assert!(
        std::fs::read_to_string(&p)
            .unwrap()
            .contains("output = \"srv\"")
    );
    let (code, r) = report(&p);
    assert_eq!(
        verdicts(&r),
        vec![v("login", "srv", "2"), v("logout", "srv", "2")]
    );
    assert_eq!(r["logs"][0]["source"], "output:srv");
    assert_eq!(code, 1);
}

#[test]
fn a_logged_error_with_growth_once_is_undeterminable() {
    // Only the first item of the error plan: one record is too little information.
    let (_dir, p) = plan("error", &[]);
    let text = std::fs::read_to_string(&p).unwrap();
    let cut = text.find("\n[[item]]\nname = \"logout\"").unwrap();
    let (_dir2, p2) = write_plan(&text[..cut]);
    let (code, r) = report(&p2);
    assert_eq!(verdicts(&r), vec![v("login", "srv", "undeterminable")]);
    assert_eq!(causes(&r), vec!["log-id-once"]);
    assert_eq!(runs(&r), 2);
    assert_eq!(code, 0);
}

#[test]
fn per_connection_buffers_without_cap_are_3a() {
    let (_dir, p) = plan("conn", &[]);
    let (code, r) = report(&p);
    assert_eq!(
        verdicts(&r),
        vec![v("open", "srv", "3-a"), v("open-more", "srv", "3-a")]
    );
    assert_eq!(causes(&r), vec!["tail-growth", "tail-growth"]);
    // 2 runs per item, 1 maximum-value run per item, 6 sweep values per item.
    assert_eq!(runs(&r), 2 * 2 + 2 + 2 * 6);
    // Each sweep started from a restarted server: a new identity each time.
    let restarts = r["restarts"].as_array().unwrap();
    assert_eq!(restarts.len(), 2);
    let pids: Vec<u64> = r["processes"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert_eq!(code, 1);
}

#[test]
fn per_connection_buffers_with_cap_are_3b() {
    let (_dir, p) = plan("conn-capped", &[]);
    let (code, r) = report(&p);
    assert_eq!(
        verdicts(&r),
        vec![v("open", "srv", "3-b"), v("open-more", "srv", "3-b")]
    );
    assert_eq!(causes(&r), vec!["tail-flat", "tail-flat"]);
    assert_eq!(runs(&r), 2 * 2 + 2 + 2 * 6);
    assert_eq!(code, 0);
}

#[test]
fn a_known_limit_decides_3a_in_the_maximum_value_test() {
    // The same unbounded pool with a known limit of 3 MiB: `open` at clients = 32 grows by
    // 28 buffers (7 MiB) in one run. `open-more` at its maximum finds the pool full
    // already; its sweep (after a restart) passes 3 MiB at clients = 16 (16 buffers, 4 MiB):
    // five runs of the sweep.
    let (_dir, p) = plan(
        "conn",
        &[(
            "ready_file = \"srv.port\"",
            "ready_file = \"srv.port\"\nlimit = \"3MiB\"",
        )],
    );
    let (code, r) = report(&p);
    assert_eq!(
        verdicts(&r),
        vec![v("open", "srv", "3-a"), v("open-more", "srv", "3-a")]
    );
    assert_eq!(causes(&r), vec!["limit-exceeded", "limit-exceeded"]);
    assert_eq!(runs(&r), 2 * 2 + 2 + 5);
    assert_eq!(code, 1);
}

#[test]
fn a_descriptor_leak_is_1a_on_fds() {
    let (_dir, p) = plan("fdleak", &[]);
    let (code, r) = report(&p);
    assert_eq!(verdicts(&r), vec![v("get", "srv", "1-a")]);
    assert_eq!(r["findings"][0]["resource"], "fds");
    assert_eq!(runs(&r), N);
    assert_eq!(code, 1);
}

#[test]
fn a_process_that_dies_during_a_run_is_a_finding_and_gets_a_new_identity() {
    let (_dir, p) = plan("die", &[]);
    let (code, r) = report(&p);
    assert_eq!(verdicts(&r), vec![v("get", "srv", "1-a")]);
    assert_eq!(causes(&r), vec!["process-ended"]);
    let reason = r["findings"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("SIGABRT"), "{reason}");
    assert_eq!(runs(&r), 3);
    let restart = &r["restarts"][0];
    let instances = r["processes"][0]["instances"].as_array().unwrap();
    assert_eq!(restart["started"]["pid"], instances.last().unwrap()["pid"]);
    assert_ne!(instances[0]["pid"], instances.last().unwrap()["pid"]);
    assert_eq!(code, 1);
}

#[test]
fn a_hung_server_in_the_upper_limit_check_is_1a() {
    let (_dir, p) = plan(
        "die",
        &[
            ("\"--die-after\", \"3\"", "\"--hang-after\", \"3\""),
            ("timeout = \"10s\"", "timeout = \"3s\""),
        ],
    );
    let (code, r) = report(&p);
    assert_eq!(verdicts(&r), vec![v("get", "srv", "1-a")]);
    assert_eq!(causes(&r), vec!["item-hung"]);
    assert_eq!(runs(&r), 3);
    assert_eq!(r["runs"][2]["outcome"]["status"], "hung");
    assert_eq!(code, 1);
}

#[test]
fn periodic_growth_is_found_by_the_idle_test() {
    let (_dir, p) = plan("idle", &[]);
    let (code, r) = report(&p);
    let f = &r["findings"][0];
    assert_eq!(
        (f["item"].as_str(), f["verdict"].as_str()),
        (Some("(idle)"), Some("1-a"))
    );
    assert_eq!(f["cause"], "idle-growth");
    assert_eq!(r["idle"].as_array().unwrap().len(), 3);
    assert_eq!(r["lists"]["idle_increase"][0], "srv");
    assert_eq!(runs(&r), 0);
    assert_eq!(code, 1);
}

#[test]
fn the_table_and_junit_say_the_same() {
    let (_dir, p) = plan("leak", &[]);
    let t = leaktest(&p, &[]);
    assert_eq!(t.code, 1);
    assert!(t.stdout.contains("FAULT in 1 process"), "{}", t.stdout);
    let row = t.stdout.lines().find(|l| l.starts_with("srv ")).unwrap();
    assert!(
        row.contains("1-a") && row.contains("steady leak") && row.contains("get"),
        "{row}"
    );

    let out = p.with_file_name("report.xml");
    let j = leaktest(&p, &["--format", "junit", "-o", out.to_str().unwrap()]);
    assert_eq!(j.code, 1);
    assert!(j.stdout.is_empty());
    let xml = std::fs::read_to_string(&out).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains(r#"<testsuites name="tansa leaktest" tests="1" failures="1""#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<testcase classname="leaktest.get" name="srv">"#),
        "{xml}"
    );
    assert!(xml.contains(r#"<failure type="1-a""#), "{xml}");
}

#[test]
fn control_characters_of_an_items_output_do_not_break_the_junit_file() {
    // The item fails with colour codes and other control bytes on its standard error:
    // the verdict's reason quotes it.
    let (_dir, p) = plan("flat", &[]);
    let text = std::fs::read_to_string(&p).unwrap();
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("command = [") && l.contains("\"request\"") {
                r#"command = "printf '\\033[31merror\\001\\033[0m cannot connect' >&2; exit 1""#
                    .to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    let text = text.join("\n");
    assert!(text.contains("exit 1"), "{text}");
    std::fs::write(&p, text).unwrap();
    let out = p.with_file_name("report.xml");
    let j = leaktest(&p, &["--format", "junit", "-o", out.to_str().unwrap()]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let xml = std::fs::read_to_string(&out).unwrap();
    // XML 1.0 allows no control character but tab, line feed and carriage return.
    let bad: Vec<char> = xml
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    assert!(bad.is_empty(), "{bad:?} in {xml}");
    assert!(
        xml.contains(r"\x1b[31merror\x01\x1b[0m cannot connect"),
        "{xml}"
    );
}

/// Bad plans: the message names the file and the line.
fn rejected(text: &str) -> (i32, String) {
    let (_dir, p) = write_plan(text);
    let o = leaktest(&p, &[]);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    (o.code, o.stderr)
}

#[test]
fn bad_plans_are_rejected_with_the_line() {
    let (code, err) = rejected(
        "[[process]]\nname = \"a\"\npid = 1\n\n[[item]]\nname = \"x\"\ncomand = \"true\"\n",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("plan.toml:7:") && err.contains("comand"),
        "{err}"
    );

    let (code, err) = rejected(
        "[[process]]\nname = \"a\"\npid = 1\n\n[[item]]\nname = \"x\"\ntimeout = \"5s\"\n",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("plan.toml:5:") && err.contains("no `command`"),
        "{err}"
    );

    let (code, err) = rejected(
        "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true {n}\"\n[[item.param]]\nname = \"n\"\nmin = 9\nmax = 3\n",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("plan.toml:9:") && err.contains("min (9) is greater than max (3)"),
        "{err}"
    );

    // Counts past their bounds say the bound, not that the number is not positive.
    for (key, value, bound) in [
        ("readings", "100000000", "at most 1000"),
        ("retest_limit", "4294967296", "at most 1000"),
    ] {
        let (code, err) = rejected(&format!(
            "[settings]\n{key} = {value}\n[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true\"\n"
        ));
        assert_eq!(code, 2);
        assert!(
            err.contains("plan.toml:2:")
                && err.contains(&format!("{key} is {value}: it may be {bound}")),
            "{err}"
        );
    }
}

#[test]
fn a_server_that_cannot_start_is_a_test_that_cannot_run() {
    let (code, err) = rejected(
        "[[process]]\nname = \"srv\"\ncommand = [\"/bin/sh\", \"-c\", \"echo cannot bind >&2; exit 3\"]\nready_file = \"p\"\n[[item]]\nname = \"x\"\ncommand = \"true\"\n",
    );
    assert_eq!(code, 4, "its own status: 1 means a fault was found");
    assert!(
        err.contains("process `srv`") && err.contains("cannot bind"),
        "{err}"
    );
}

#[test]
fn durations_too_long_for_the_clock_are_rejected_with_the_line() {
    // They used to pass the plan check and panic when added to the clock.
    let (code, err) = rejected(
        "[[process]]\nname = \"srv\"\ncommand = [\"sleep\", \"30\"]\nstart_timeout = \"18446744073709551615s\"\n[[item]]\nname = \"x\"\ncommand = \"true\"\n",
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("plan.toml:4:") && err.contains("longer than a year"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let (code, err) = rejected(
        "[[process]]\nname = \"srv\"\ncommand = [\"sleep\", \"30\"]\n[[item]]\nname = \"x\"\ncommand = \"true\"\ntimeout = \"18446744073709551615s\"\n",
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("plan.toml:7:") && err.contains("longer than a year"),
        "{err}"
    );
}
