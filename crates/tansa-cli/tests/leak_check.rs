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

const NONE: (u64, u64) = (0, 0);

/// What the check must find of each function's blocks in `lost.c` (its comment says
/// why): `(definite, indirect, reachable)` blocks and bytes. `lose_cycle`'s two blocks come
/// from two sites (one line, two call paths), given here together.
const LOST_C: [(&str, [(u64, u64); 3]); 11] = [
    ("lost!lose_many", [(5, 200), NONE, NONE]),
    ("lost!lose_box", [(1, 16), NONE, NONE]),
    ("lost!lose_inner", [NONE, (1, 24), NONE]),
    ("lost!lose_cycle", [(1, 32), (1, 32), NONE]),
    ("lost!lose_big", [(1, 200 * 1024), NONE, NONE]),
    ("lost!keep_global", [NONE, NONE, (1, 100)]),
    ("lost!keep_interior", [NONE, NONE, (1, 64)]),
    ("lost!keep_in_thread", [NONE, NONE, (1, 48)]),
    ("lost!keep_in_mapping", [NONE, NONE, (1, 56)]),
    ("lost!keep_big", [NONE, NONE, (1, 300_000)]),
    ("lost!freed", [NONE, NONE, NONE]),
];

/// Valgrind's leak summary of `lost.c`: definitely lost (blocks, bytes), indirectly lost.
const LOST_C_DEFINITE: (u64, u64) = (8, 5 * 40 + 16 + 32 + 200 * 1024);
const LOST_C_INDIRECT: (u64, u64) = (2, 24 + 32);

/// `lost.c`, built.
fn lost_c() -> std::path::PathBuf {
    program("lost", "lost.c", &["-g", "-O0", "-pthread"])
}

/// Records `lost.c` with the leak check into `dir`: the recording and tansa's output.
fn record_lost_c(dir: &std::path::Path) -> (std::path::PathBuf, std::process::Output) {
    let file = dir.join("lost.tansa");
    let out = record(&file, &["--leak-check"], &[lost_c().to_str().unwrap()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (file, out)
}

fn leaks_json(file: &std::path::Path) -> Value {
    let out = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "leaks failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lost_blocks_are_told_from_reachable_ones_at_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, out) = record_lost_c(tmp.path());
    assert!(
        stderr(&out).contains("blocks lost at exit, and their allocation sites: tansa leaks"),
        "{}",
        stderr(&out)
    );
    let report = leaks_json(&file);
    for (function, figures) in LOST_C {
        if function != "lost!lose_cycle" {
            assert_eq!(at_exit(&report, function), figures, "{function}");
        }
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
        assert_eq!(c[2], NONE, "a cycle block counted reachable: {cycle:?}");
    }
    assert_eq!((definite, indirect), ((1, 32), (1, 32)), "{cycle:?}");

    // The whole process, as Valgrind's leak summary gives it for this program: the C
    // library's own blocks are reachable (the thread's), never lost.
    let check = &report["leak_check"];
    assert_eq!(check["images_checked"], 1, "{check:#}");
    assert_eq!(check["images_not_checked"], 0, "{check:#}");
    lost_c_summary(check);

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
    let none = NONE;
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
    let exe = lost_c();
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
    // Not with --sample-rate.
    let out = run_tansa(&[
        "record",
        "--leak-check",
        "--sample-rate",
        "64KiB",
        "-o",
        "/dev/null",
        "--",
        exe,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Checks a leak check summary (`leak_check` of `tansa leaks` or `tansa report`) of one run
/// of `lost.c`: Valgrind's figures.
fn lost_c_summary(check: &Value) {
    lost_c_summary_beside(check, 0);
}

/// [`lost_c_summary`] for a recording of `lost.c` and `not_checked` other images.
fn lost_c_summary_beside(check: &Value, not_checked: u64) {
    assert_eq!(check["images_checked"], 1, "{check:#}");
    assert_eq!(check["images_not_checked"], not_checked, "{check:#}");
    let x = &check["at_exit"];
    let n = |k: &str| x[k].as_u64().unwrap();
    assert_eq!(
        (n("definite_blocks"), n("definite_bytes")),
        LOST_C_DEFINITE,
        "{check:#}"
    );
    assert_eq!(
        (n("indirect_blocks"), n("indirect_bytes")),
        LOST_C_INDIRECT,
        "{check:#}"
    );
    assert!(
        n("reachable_bytes") >= 100 + 64 + 48 + 56 + 300_000,
        "{check:#}"
    );
}

/// Checks a heap report by function (`tansa.memory-report.v1`) of one run of `lost.c`: the
/// leak check in total, for the process, and for each function as [`LOST_C`] says.
fn lost_c_report(report: &Value) {
    lost_c_summary(&report["leak_check"]);
    assert_eq!(
        report["process"]["at_exit"], report["leak_check"]["at_exit"],
        "{report:#}"
    );
    for (function, expected) in LOST_C {
        assert_eq!(figures(unit(report, function)), expected, "{function}");
    }
}

/// The heap report sums the check up, in total, per process and per unit, with the same
/// figures as per site; so does the report `record --online` prints at exit. A recording
/// made without the check says nothing of it.
#[test]
fn the_heap_report_and_the_online_report_give_the_leak_check_per_unit() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, _) = record_lost_c(tmp.path());
    let exe = lost_c();
    let exe = exe.to_str().unwrap();
    lost_c_report(&report_json(&file, &["--by", "function"]));
    // By library, with every library on the stack charged: the program's own library
    // holds every lost block.
    let by_lib = report_json(&file, &["--charge", "all"]);
    let lib = &unit(&by_lib, "lost")["at_exit"];
    assert_eq!(lib["definite_bytes"], LOST_C_DEFINITE.1, "{by_lib:#}");
    assert_eq!(lib["indirect_bytes"], LOST_C_INDIRECT.1, "{by_lib:#}");

    // Ordered by bytes lost: the 200 KiB block's function first, then the five blocks'.
    let sorted = report_json(&file, &["--by", "function", "--sort", "lost"]);
    let first: Vec<&str> = sorted["units"].as_array().unwrap()[..3]
        .iter()
        .map(|u| u["unit"].as_str().unwrap())
        .collect();
    assert_eq!(
        first,
        ["lost!lose_big", "lost!lose_many", "lost!lose_cycle"],
        "{sorted:#}"
    );

    // The table: a column of bytes lost per unit, and the summary.
    let out = run_tansa(&["report", file.to_str().unwrap(), "--by", "function"]);
    assert!(out.status.success(), "report failed: {}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text.lines().find(|l| l.starts_with("unit ")).unwrap();
    assert!(header.ends_with("lost at exit"), "{text}");
    let row = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {text}"))
            .to_string()
    };
    assert!(row("lost!lose_many").ends_with(" 200 B"), "{text}");
    assert!(row("lost!keep_global").ends_with(" 0 B"), "{text}");
    assert!(
        text.contains("definitely lost: 205048 byte(s) in 8 block(s)")
            && text.contains("indirectly lost: 56 byte(s) in 2 block(s)"),
        "{text}"
    );

    // Online: the same figures, from the events as they arrive.
    let online = online_report_json(
        &tmp.path().join("online.json"),
        &["--leak-check", "--by", "function"],
        &[exe],
    );
    lost_c_report(&online);

    // Without the check: nothing said of it.
    let plain = tmp.path().join("plain.tansa");
    let out = record(&plain, &[], &[exe]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let report = report_json(&plain, &["--by", "function"]);
    assert!(report.get("leak_check").is_none(), "{report:#}");
    assert!(unit(&report, "lost!lose_many").get("at_exit").is_none());
    let out = run_tansa(&["report", plain.to_str().unwrap(), "--sort", "lost"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("made without it"), "{}", stderr(&out));
    let out = run_tansa(&["report", plain.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains("lost at exit") && !text.contains("leak check"),
        "{text}"
    );

    // Read with a recording made without it (first): the check covers the other's image
    // only, and says so.
    let both = report_json(&plain, &[file.to_str().unwrap(), "--by", "function"]);
    lost_c_summary(&both["leak_check"]);
    for (function, expected) in LOST_C {
        assert_eq!(figures(unit(&both, function)), expected, "{function}");
    }
    let warned = |r: &Value| {
        r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("made without --leak-check"))
    };
    assert!(warned(&both), "{both:#}");
    let out = run_tansa(&[
        "leaks",
        plain.to_str().unwrap(),
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "leaks failed: {}", stderr(&out));
    let leaks: Value = serde_json::from_slice(&out.stdout).unwrap();
    lost_c_summary(&leaks["leak_check"]);
    assert!(warned(&leaks), "{leaks:#}");
}

/// Blocks lost by threads that ended before the process: the exiting thread's last
/// event came before them. The check's findings were timed at that event, when the blocks
/// were not allocated yet, so they were dropped: 0 bytes lost, the blocks counted
/// reachable, unless main happened to allocate once more (Valgrind: 3,000 bytes
/// definitely lost in 3 blocks either way). They are now timed at the check's end.
#[test]
fn blocks_lost_by_threads_that_ended_are_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = program("thread_lost", "thread_lost.c", &["-g", "-O2", "-pthread"]);
    let exe = exe.to_str().unwrap();
    for again in [false, true] {
        let file = tmp.path().join(format!("lost-{again}.tansa"));
        let mut cmd = vec![exe, "3"];
        if again {
            cmd.push("again");
        }
        let out = record(&file, &["--leak-check"], &cmd);
        assert!(out.status.success(), "record failed: {}", stderr(&out));
        let leaks = leaks_json(&file);
        assert_eq!(
            at_exit(&leaks, "thread_lost!lose"),
            [(3, 3000), NONE, NONE],
            "again: {again}"
        );
        let report = report_json(&file, &["--by", "function"]);
        assert_eq!(
            figures(unit(&report, "thread_lost!lose")),
            [(3, 3000), NONE, NONE],
            "again: {again}"
        );
        // Online mode decodes the same records as they come.
        let online = online_report_json(
            &tmp.path().join(format!("online-{again}.json")),
            &["--leak-check", "--by", "function"],
            &cmd,
        );
        assert_eq!(
            figures(unit(&online, "thread_lost!lose")),
            [(3, 3000), NONE, NONE],
            "again: {again}"
        );
    }
}

/// `exit` called from a signal handler that interrupted an allocation (a handler that
/// exits on Ctrl-C, say): the leak check runs inside the agent's hook. Its findings are
/// written there, after what handlers queued; when they cannot be (the agent was busy:
/// forced here by a test setting), they are counted lost and the report says so.
#[test]
fn a_leak_check_called_from_a_signal_handler_inside_a_hook_is_recorded_or_counted() {
    let (exe, raiser) = sigqueue_with_raiser();
    let cmd = [exe.to_str().unwrap(), "3", raiser.to_str().unwrap(), "exit"];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exit.tansa");
    let out = record(&file, &["--leak-check"], &cmd);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = leaks_json(&file);
    // The first image re-executes itself (with the shim behind the agent): not checked.
    let check = &report["leak_check"];
    assert_eq!(check["images_checked"], 1, "{report:#}");
    assert_eq!(check["images_not_checked"], 1, "{report:#}");
    // lose()'s blocks are lost; the handler's, in a global, are not.
    assert_eq!(at_exit(&report, "sigqueue!lose"), [(5, 200), NONE, NONE]);
    assert_eq!(
        at_exit(&report, "sigqueue!handler"),
        [NONE, NONE, (40, 40 * 33)]
    );

    // The agent busy when the handler ran: the findings are counted lost, and said.
    let busy = dir.path().join("busy.tansa");
    let out = record_env(
        &busy,
        &["--leak-check"],
        &cmd,
        &[("TANSA_TEST_QUEUE_NESTED", "1")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&busy, &[]);
    assert_eq!(r["leak_check"]["images_checked"], 0, "{r:#}");
    // The handler's 8 allocations beyond the queue of 32, and the findings (at least
    // lose()'s 5 blocks and the summary).
    let lost = r["processes"][1]["losses"]["signal_queue"]
        .as_u64()
        .unwrap();
    assert!(lost >= 8 + 6, "{r:#}");
    assert!(
        r["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("the leak check's findings could not be written")),
        "{r:#}"
    );
}

/// The bytes lost at exit are a weight of flame graphs and exports (`lost`, `lost-count`):
/// per allocation stack, each function of `lost.c` as [`LOST_C`] says, and nothing for the
/// blocks kept. A recording made without the check has no such weight.
#[test]
fn lost_memory_is_a_weight_of_flame_graphs_and_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, _) = record_lost_c(tmp.path());
    let expected = |blocks: bool| -> std::collections::BTreeMap<String, u64> {
        LOST_C
            .iter()
            .map(|(f, x)| {
                let (n, b) = (x[0].0 + x[1].0, x[0].1 + x[1].1);
                (f.to_string(), if blocks { n } else { b })
            })
            .filter(|(_, v)| *v > 0)
            .collect()
    };
    assert_eq!(collapsed_by_leaf(&file, "lost"), expected(false));
    assert_eq!(collapsed_by_leaf(&file, "lost-count"), expected(true));
    let svg = tmp.path().join("lost.svg");
    let out = run_tansa(&[
        "flamegraph",
        file.to_str().unwrap(),
        "--weight",
        "lost",
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "flamegraph failed: {}", stderr(&out));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("lost!lose_big") && !drawn.contains("lost!keep_big"),
        "the graph draws the lost blocks' stacks only"
    );
    // A weight that is none of them is unknown, not one of a check the recording lacks.
    let out = run_tansa(&[
        "flamegraph",
        file.to_str().unwrap(),
        "--weight",
        "lostfoo",
        "-o",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("there is no weight `lostfoo`"),
        "{}",
        stderr(&out)
    );

    let plain = tmp.path().join("plain.tansa");
    let out = record(&plain, &[], &[lost_c().to_str().unwrap()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let out = run_tansa(&[
        "flamegraph",
        plain.to_str().unwrap(),
        "--weight",
        "lost",
        "-o",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("made without it (tansa record --leak-check)"),
        "{}",
        stderr(&out)
    );
}

/// Without address randomization (`setarch -R`), the heap starts right after the
/// executable's data: the globals there are roots all the same. (The 64 MiB window of a
/// thread arena's heap was once applied to the main arena's blocks too, which left those
/// globals out now and then: their blocks looked lost.)
#[test]
fn globals_beside_the_heap_are_roots() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("norandom.tansa");
    let exe = lost_c();
    let out = record(
        &file,
        &["--leak-check"],
        &["setarch", "-R", exe.to_str().unwrap()],
    );
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let report = leaks_json(&file);
    // setarch's own image ran `exec`: not checked.
    lost_c_summary_beside(&report["leak_check"], 1);
    assert_eq!(at_exit(&report, "lost!keep_global"), [NONE, NONE, (1, 100)]);
}

/// `(definite, indirect, reachable)` blocks and bytes of a process's `at_exit` in a heap
/// report.
fn process_figures(report: &Value, pid: u64) -> [(u64, u64); 3] {
    let p = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid}: {report:#}"));
    figures(p)
}

/// The site of `function` in process `pid` of a `tansa leaks --format json` report, with
/// the pid of the process it was inherited from (`None`: the process's own site).
fn site_in<'a>(report: &'a Value, function: &str, pid: u64, from: Option<u64>) -> &'a Value {
    report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["site"]["function"] == function
                && s["pid"] == pid
                && s["inherited_from"]["pid"].as_u64() == from
        })
        .unwrap_or_else(|| panic!("no site in {function} of {pid} from {from:?}: {report:#}"))
}

/// A forked child's check covers the blocks it inherited: those it lost count in its own
/// figures, charged to the site in the parent that allocated them; one it freed is gone
/// for the child only (the parent still holds its copy); one it can still reach is left to
/// the parent. `forklost.c` says what each function's blocks are; Valgrind
/// (`--trace-children=yes`) gives the same lost figures per process. The parent frees its
/// copy of the child's biggest lost block after the child ended: the child's loss stays.
#[test]
fn blocks_a_forked_child_inherited_and_lost_are_its_own_losses() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = program("forklost", "forklost.c", &["-g", "-O0"]);
    let exe = exe.to_str().unwrap();
    let file = tmp.path().join("forklost.tansa");
    let out = record(&file, &["--leak-check"], &[exe]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));

    // Per process, per unit and in total, recorded and online.
    let online = online_report_json(
        &tmp.path().join("online.json"),
        &["--leak-check", "--by", "function"],
        &[exe],
    );
    for report in [report_json(&file, &["--by", "function"]), online] {
        let pids: Vec<u64> = report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids.len(), 2, "{report:#}");
        let (parent, child) = (pids[0], pids[1]);
        assert_eq!(
            process_figures(&report, parent),
            [(2, 111 + 70), NONE, (3, 300 + 64 + 48)],
            "{report:#}"
        );
        assert_eq!(
            process_figures(&report, child),
            [(4, 4000 + 111 + 64 + 33), (1, 48), NONE],
            "{report:#}"
        );
        let check = &report["leak_check"];
        assert_eq!(check["images_checked"], 2, "{check:#}");
        let x = &check["at_exit"];
        assert_eq!(
            (x["definite_blocks"].as_u64(), x["definite_bytes"].as_u64()),
            (Some(6), Some(4389)),
            "{check:#}"
        );
        assert_eq!(
            (x["indirect_blocks"].as_u64(), x["indirect_bytes"].as_u64()),
            (Some(1), Some(48)),
            "{check:#}"
        );
        assert_eq!(report["inherited_frees"], 1, "{report:#}");
        for (function, expected) in [
            ("forklost!drop_in_child", [(1, 4000), NONE, NONE]),
            ("forklost!free_in_child", [NONE, NONE, (1, 300)]),
            ("forklost!lose_early", [(2, 222), NONE, NONE]),
            ("forklost!list_head", [(1, 64), NONE, (1, 64)]),
            ("forklost!list_node", [NONE, (1, 48), (1, 48)]),
            ("forklost!lose_in_child", [(1, 33), NONE, NONE]),
            ("forklost!lose_in_parent", [(1, 70), NONE, NONE]),
        ] {
            assert_eq!(figures(unit(&report, function)), expected, "{function}");
        }
    }

    // Per site: the child's losses of inherited blocks at the parent's sites, apart from
    // the parent's own figures there.
    let leaks = leaks_json(&file);
    let pid = |s: &Value| s["pid"].as_u64().unwrap();
    let parent = pid(site(&leaks, "forklost!lose_in_parent"));
    let child = pid(site(&leaks, "forklost!lose_in_child"));
    assert_ne!(parent, child);
    for (function, pid, from, expected) in [
        (
            "forklost!drop_in_child",
            child,
            Some(parent),
            [(1, 4000), NONE, NONE],
        ),
        ("forklost!drop_in_child", parent, None, [NONE, NONE, NONE]),
        (
            "forklost!lose_early",
            child,
            Some(parent),
            [(1, 111), NONE, NONE],
        ),
        ("forklost!lose_early", parent, None, [(1, 111), NONE, NONE]),
        (
            "forklost!list_head",
            child,
            Some(parent),
            [(1, 64), NONE, NONE],
        ),
        ("forklost!list_head", parent, None, [NONE, NONE, (1, 64)]),
        (
            "forklost!list_node",
            child,
            Some(parent),
            [NONE, (1, 48), NONE],
        ),
        ("forklost!list_node", parent, None, [NONE, NONE, (1, 48)]),
        (
            "forklost!free_in_child",
            parent,
            None,
            [NONE, NONE, (1, 300)],
        ),
        ("forklost!lose_in_child", child, None, [(1, 33), NONE, NONE]),
        (
            "forklost!lose_in_parent",
            parent,
            None,
            [(1, 70), NONE, NONE],
        ),
    ] {
        let s = site_in(&leaks, function, pid, from);
        assert_eq!(figures(s), expected, "{function} in {pid}: {s:#}");
    }
    // The child never allocated at the parent's sites: no allocation, and the blocks it
    // lost there. The block it freed is no site of its own.
    let s = site_in(&leaks, "forklost!drop_in_child", child, Some(parent));
    assert_eq!(
        (&s["allocations"], &s["leaked_blocks"], &s["leaked_bytes"]),
        (&Value::from(0), &Value::from(1), &Value::from(4000)),
        "{s:#}"
    );
    assert!(
        !leaks["sites"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["site"]["function"] == "forklost!free_in_child" && pid(s) == child),
        "{leaks:#}"
    );
    let x = &leaks["leak_check"]["at_exit"];
    assert_eq!(
        (&x["definite_blocks"], &x["definite_bytes"]),
        (&Value::from(6), &Value::from(4389)),
        "{leaks:#}"
    );
    assert_eq!(
        (&x["indirect_blocks"], &x["indirect_bytes"]),
        (&Value::from(1), &Value::from(48)),
        "{leaks:#}"
    );
    // The table says where the child's lost blocks came from.
    let out = run_tansa(&["leaks", file.to_str().unwrap()]);
    assert!(out.status.success(), "leaks failed: {}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "allocated by process {parent} before it forked this one; 1 inherited block(s), \
             4000 byte(s) lost at the end"
        )),
        "{text}"
    );
}
