//! The leak check at exit (`tansa record --leak-check`): blocks still allocated when a
//! process exits are told apart as definitely lost, indirectly lost and still reachable,
//! as Valgrind's memcheck counts them (`tests/programs/lost.c` says what each function's
//! blocks are).

mod common;

use common::*;
use serde_json::Value;

/// The site of `function` in a `tansa leaks --format json` report.
fn site<'a>(report: &'a Value, function: &str) -> &'a Value {
    report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["site"]["function"] == function)
        .unwrap_or_else(|| panic!("no site in {function}: {report:#}"))
}

/// `(definite, indirect, reachable)` blocks and bytes of a site's blocks at exit.
fn at_exit(report: &Value, function: &str) -> [(u64, u64); 3] {
    figures(site(report, function))
}

/// `(definite, indirect, reachable)` blocks and bytes of `site`'s `at_exit`.
fn figures(site: &Value) -> [(u64, u64); 3] {
    let x = &site["at_exit"];
    assert!(x.is_object(), "a site not checked: {site:#}");
    let n = |k: &str| x[k].as_u64().unwrap();
    [
        (n("definite_blocks"), n("definite_bytes")),
        (n("indirect_blocks"), n("indirect_bytes")),
        (n("reachable_blocks"), n("reachable_bytes")),
    ]
}

fn leaks_json(file: &std::path::Path) -> Value {
    let out = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "leaks failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lost_blocks_are_told_from_reachable_ones_at_exit() {
    let exe = program("lost", "lost.c", &["-g", "-O0", "-pthread"]);
    let exe = exe.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("lost.tansa");
    let out = record(&file, &["--leak-check"], &[exe]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let report = leaks_json(&file);
    let none = (0, 0);
    let expected: [(&str, [(u64, u64); 3]); 10] = [
        ("lost!lose_many", [(5, 200), none, none]),
        ("lost!lose_box", [(1, 16), none, none]),
        ("lost!lose_inner", [none, (1, 24), none]),
        ("lost!lose_big", [(1, 200 * 1024), none, none]),
        ("lost!keep_global", [none, none, (1, 100)]),
        ("lost!keep_interior", [none, none, (1, 64)]),
        ("lost!keep_in_thread", [none, none, (1, 48)]),
        ("lost!keep_in_mapping", [none, none, (1, 56)]),
        ("lost!keep_big", [none, none, (1, 300_000)]),
        ("lost!freed", [none, none, none]),
    ];
    for (function, figures) in expected {
        assert_eq!(at_exit(&report, function), figures, "{function}");
    }
    // The two blocks that point at each other: one leads the group, the other goes with
    // it (two sites: the same line, two call paths).
    let cycle: Vec<[(u64, u64); 3]> = report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"] == "lost!lose_cycle")
        .map(figures)
        .collect();
    let (mut definite, mut indirect) = ((0, 0), (0, 0));
    for c in &cycle {
        definite = (definite.0 + c[0].0, definite.1 + c[0].1);
        indirect = (indirect.0 + c[1].0, indirect.1 + c[1].1);
        assert_eq!(c[2], none, "a cycle block counted reachable: {cycle:?}");
    }
    assert_eq!((definite, indirect), ((1, 32), (1, 32)), "{cycle:?}");

    // The whole process, as Valgrind's leak summary gives it for this program: the C
    // library's own blocks are reachable (the thread's), never lost.
    let check = &report["leak_check"];
    assert_eq!(check["images_checked"], 1, "{check:#}");
    assert_eq!(check["images_not_checked"], 0, "{check:#}");
    let x = &check["at_exit"];
    assert_eq!(x["definite_blocks"], 8, "{check:#}");
    assert_eq!(
        x["definite_bytes"],
        5 * 40 + 16 + 32 + 200 * 1024,
        "{check:#}"
    );
    assert_eq!(x["indirect_blocks"], 2, "{check:#}");
    assert_eq!(x["indirect_bytes"], 24 + 32, "{check:#}");
    assert!(
        x["reachable_bytes"].as_u64().unwrap() >= 100 + 64 + 48 + 56 + 300_000,
        "{check:#}"
    );

    // The text view: the summary, and the sites that lost blocks shown without --all.
    let out = run_tansa(&["leaks", file.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("leak check at exit of 1 process image(s):"),
        "{text}"
    );
    assert!(
        text.contains("definitely lost: 205048 byte(s) in 8 block(s)"),
        "{text}"
    );
    assert!(
        text.contains("indirectly lost: 56 byte(s) in 2 block(s)"),
        "{text}"
    );
    assert!(text.contains("lost!lose_many"), "{text}");
    assert!(
        text.contains("at exit: 5 block(s), 200 byte(s) definitely lost"),
        "{text}"
    );
    assert!(!text.contains("lost!keep_global"), "{text}");

    // The raw records: one per unreachable block, then the check's summary.
    let records = dumped_records(&file);
    let kinds = |k: &str| records.iter().filter(|r| r["kind"] == k).count();
    assert_eq!(kinds("leak_scan"), 1);
    assert!(kinds("unreached") >= 10, "{records:#?}");
}

/// At the scale of real programs: 200,000 blocks (every tenth lost) and 10,000 threads
/// still running at exit, each holding a block on its stack (8 MiB each, mostly never
/// touched: 80 GB of stacks, of which only the pages touched are read). Every figure is
/// exact.
#[test]
fn two_hundred_thousand_blocks_and_ten_thousand_threads_are_checked_exactly() {
    let exe = program("lost_many", "lost_many.c", &["-g", "-O1", "-pthread"]);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("many.tansa");
    let out = record(
        &file,
        &["--leak-check"],
        &[exe.to_str().unwrap(), "10000", "200000"],
    );
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let report = leaks_json(&file);
    let none = (0, 0);
    // kept(i) allocates 24 + (i % 5) * 8 bytes; every tenth (i % 5 == 0: 24 bytes) is lost.
    let kept_bytes: u64 = (0..200_000u64).map(|i| 24 + (i % 5) * 8).sum();
    assert_eq!(
        at_exit(&report, "lost_many!kept"),
        [
            (20_000, 20_000 * 24),
            none,
            (180_000, kept_bytes - 20_000 * 24)
        ]
    );
    assert_eq!(
        at_exit(&report, "lost_many!held"),
        [none, none, (10_000, 10_000 * 32)]
    );
    assert!(
        report["warnings"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    assert_eq!(report["leak_check"]["images_checked"], 1);
}

#[test]
fn a_process_that_does_not_exit_is_not_checked_and_no_check_is_made_unasked() {
    let exe = program("lost", "lost.c", &["-g", "-O0", "-pthread"]);
    let exe = exe.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // Killed by a signal: nothing is checked, and the report says so.
    let killed = tmp.path().join("killed.tansa");
    let out = record(&killed, &["--leak-check"], &[exe, "kill"]);
    assert!(!out.status.success());
    let report = leaks_json(&killed);
    assert_eq!(report["leak_check"]["images_checked"], 0, "{report:#}");
    assert_eq!(report["leak_check"]["images_not_checked"], 1, "{report:#}");
    assert!(site(&report, "lost!lose_many")["at_exit"].is_null());
    let out = run_tansa(&["leaks", killed.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 process image(s) not checked"), "{text}");
    // Without --leak-check: no check, no field.
    let plain = tmp.path().join("plain.tansa");
    let out = record(&plain, &[], &[exe]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let report = leaks_json(&plain);
    assert!(report.get("leak_check").is_none(), "{report:#}");
    assert!(site(&report, "lost!lose_many")["at_exit"].is_null());
    assert!(
        dumped_records(&plain)
            .iter()
            .all(|r| r["kind"] != "leak_scan" && r["kind"] != "unreached")
    );
    // Not with --online or --sample-rate.
    for other in [&["--online"][..], &["--sample-rate", "64KiB"][..]] {
        let mut args = vec!["record", "--leak-check"];
        args.extend_from_slice(other);
        args.extend(["-o", "/dev/null", "--", exe]);
        let out = run_tansa(&args);
        assert_eq!(out.status.code(), Some(2), "{other:?}: {}", stderr(&out));
    }
}
