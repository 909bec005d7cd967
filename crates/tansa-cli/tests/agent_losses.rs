//! A loss is never silent: each cause of loss is forced, counted by the agent, carried by
//! the recording and shown by every report. And the agent reaches its collector whatever
//! the program does to the inherited descriptor, starts threads for library constructors
//! that run before it, and reports how every process ended.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Allocator calls recorded in `file`, by thread id and by function (`malloc`, `free`,
/// `realloc`, ...).
fn calls_by_thread(file: &std::path::Path) -> HashMap<u64, HashMap<String, u64>> {
    let mut counts: HashMap<u64, HashMap<String, u64>> = HashMap::new();
    for r in dumped_records(file) {
        let function = match r["kind"].as_str().unwrap() {
            "alloc" | "realloc" => r["op"].as_str().unwrap(),
            "free" => "free",
            _ => continue,
        };
        let tid = r["tid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no thread: {r}"));
        *counts
            .entry(tid)
            .or_default()
            .entry(function.to_string())
            .or_default() += 1;
    }
    counts
}

/// The number at the start of the warning that ends with `suffix`.
fn warned_count(r: &Value, suffix: &str) -> Option<u64> {
    warnings(r)
        .iter()
        .find_map(|w| w.split_once(suffix).map(|(n, _)| n.trim().parse().unwrap()))
}

/// A stack deeper than `--max-frames` is recorded cut, and nothing said so: what was
/// allocated there was charged from the outermost frame recorded (a recursion's function,
/// not the library the call came through), silently. Every report now says how many
/// stacks reached the limit; a recording whose stacks all fit says nothing.
#[test]
fn stacks_cut_at_the_frame_limit_are_reported() {
    let exe = program("deepstack", "deepstack.c", &["-g", "-O0"]);
    let exe = exe.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let suffix = " call stack(s) reached the recording's limit of 64 frames";
    let file = tmp.path().join("deep.tansa");
    let out = record(&file, &["--max-frames", "64"], &[exe, "5", "200", "300"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The two deep recursions leave the same 64 innermost frames: one stack.
    let r = report_json(&file, &[]);
    assert_eq!(warned_count(&r, suffix), Some(1), "{r:#}");
    let text = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(suffix) || stderr(&text).contains(suffix),
        "the table says it too: {}",
        stderr(&text)
    );
    let online = online_report_json(
        &tmp.path().join("deep.json"),
        &["--max-frames", "64"],
        &[exe, "5", "200", "300"],
    );
    assert_eq!(warned_count(&online, suffix), Some(1), "{online:#}");
    // Deeper than the main thread's stack mapping was when it started (it grows on
    // demand): the stack is still unwound, to the default limit of 128 frames. It was
    // recorded with its innermost frame alone, as on no known stack.
    let file = tmp.path().join("grown.tansa");
    let out = record(&file, &[], &[exe, "5", "5000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let limit = "call stack(s) reached the recording's limit of 128 frames";
    assert_eq!(warned_count(&r, &format!(" {limit}")), Some(1), "{r:#}");
    // Within the limit: nothing to say.
    let file = tmp.path().join("shallow.tansa");
    let out = record(&file, &["--max-frames", "64"], &[exe, "5", "50"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    assert_eq!(warned_count(&r, suffix), None, "{r:#}");
}

/// Threads that find no ring: with the agent limited to 4 rings (main and 3 workers), 16
/// threads alive at once. Every call of the workers is either recorded or counted, and the
/// count is in the JSON, the table and (on stderr) the CSV report.
#[test]
fn events_of_threads_without_a_ring_are_counted_and_reported() {
    let exe = program("threadchurn", "threadchurn.c", &["-g", "-O2", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rings.tansa");
    let out = record_env(
        &file,
        &[],
        &[exe.to_str().unwrap(), "16", "16"],
        &[("TANSA_TEST_MAX_RINGS", "4")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let lost = r["processes"][0]["losses"]["no_ring"].as_u64().unwrap();
    assert!(lost > 0, "{}", r["processes"][0]);
    assert_eq!(r["processes"][0]["lost_events"].as_u64().unwrap(), lost);
    // The recorder says it as it ends, too.
    assert!(
        stderr(&out).contains(&format!(
            "warning: the agent could not record {lost} event(s)"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        warned_count(&r, "event(s) not recorded: their thread found no free ring"),
        Some(lost),
        "{:?}",
        warnings(&r)
    );
    // Accounting: each worker makes 4 mallocs and 4 frees; those not in the recording are
    // exactly the ones counted as lost.
    let pid = r["processes"][0]["pid"].as_u64().unwrap();
    let recorded: u64 = calls_by_thread(&file)
        .iter()
        .filter(|(tid, _)| **tid != pid)
        .flat_map(|(_, kinds)| kinds.iter())
        .filter(|(k, _)| *k == "malloc" || *k == "free")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(recorded + lost, 16 * 8, "recorded {recorded}, lost {lost}");
    let table = run_tansa(&["report", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains(&format!("warning: {lost} event(s) not recorded")),
        "{text}"
    );
    let csv = run_tansa(&["report", file.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(
        stderr(&csv)
            .matches(&format!("{lost} event(s) not recorded"))
            .count(),
        1,
        "once: {}",
        stderr(&csv)
    );
    // The leak report says it too, in its JSON and on standard error.
    let leaks = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json"]);
    assert!(leaks.status.success(), "{}", stderr(&leaks));
    let l: serde_json::Value = serde_json::from_slice(&leaks.stdout).unwrap();
    let said = format!("the agent could not record {lost} event(s)");
    assert!(
        l["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with(&said)),
        "{l}"
    );
    assert!(stderr(&leaks).contains(&said), "{}", stderr(&leaks));
}

/// Signal-handler events beyond the per-thread queue: a shim behind the agent raises a
/// signal inside every malloc(77) of 10 rounds; the handler makes 40 mallocs, and the
/// queue (always used in this test setting) holds 32 of them.
#[test]
fn signal_handler_events_beyond_the_queue_are_counted_and_reported() {
    let (exe, raiser) = sigqueue_with_raiser();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("queue.tansa");
    let out = record_env(
        &file,
        &[],
        &[exe.to_str().unwrap(), "10", raiser.to_str().unwrap()],
        &[("TANSA_TEST_QUEUE_NESTED", "1")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "handled 10");
    let r = report_json(&file, &[]);
    let losses = &r["processes"][1]["losses"];
    assert_eq!(losses["signal_queue"], 10 * 8, "{}", r["processes"]);
    assert_eq!(
        warned_count(&r, "event(s) not recorded: signal handlers allocated more"),
        Some(80),
        "{:?}",
        warnings(&r)
    );
    let n33 = dumped_records(&file)
        .iter()
        .filter(|r| r["kind"] == "alloc" && r["op"] == "malloc" && r["size"] == 33)
        .count();
    assert_eq!(n33, 10 * 32, "the queued events are recorded");
}

/// The collector killed while the program runs: the program goes on, unharmed, and its
/// agent says on stderr how many events were not recorded.
#[test]
fn a_dead_recorder_is_reported_by_the_program_it_recorded() {
    ensure_agent();
    let exe = program("orphan", "orphan.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("orphan.tansa");
    let mut child = Command::new(tansa())
        .args([
            "record",
            "--ring-kb",
            "64",
            "-o",
            file.to_str().unwrap(),
            "--",
        ])
        .arg(&exe)
        .arg("2000000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: i32 = line
        .trim()
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // SAFETY: sending a signal has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    // The pipes close when the program, which holds them too, exits.
    let started = Instant::now();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(120));
    assert_eq!(rest.trim(), "done", "the program ran to its end");
    let said = err
        .lines()
        .find(|l| l.contains("ended before process"))
        .unwrap_or_else(|| panic!("no word of the recorder's death: {err}"));
    let lost: u64 = said
        .split_once("ended before process ")
        .and_then(|(_, s)| s.split_once(": "))
        .and_then(|(_, s)| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(lost > 0, "{said}");
    assert!(lost <= 4_000_000, "{said}");
}

fn fdreuse_programs() -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let fdreuse = program("fdreuse", "fdreuse.c", &["-g", "-O1"]);
    let allocer = program("allocer", "allocer.c", &["-g", "-O1"]);
    let stat = program("allocer-static", "allocer.c", &["-g", "-O1", "-static"]);
    (fdreuse, allocer, stat)
}

fn processes(r: &Value) -> Vec<(u64, String, String)> {
    r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                p["exe"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string(),
                p["exit"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A program closes the agent's inherited descriptor and puts a socket of its own at that
/// number: its socket receives nothing of tansa's, and its forked child and the program it
/// starts are still recorded (through the parent's private socket and the endpoint).
#[test]
fn a_reused_descriptor_number_receives_nothing_and_loses_no_process() {
    let (fdreuse, allocer, _) = fdreuse_programs();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reuse.tansa");
    let out = record(
        &file,
        &[],
        &[fdreuse.to_str().unwrap(), allocer.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "received 0");
    let r = report_json(&file, &["--by", "function"]);
    let mut procs = processes(&r);
    procs.sort();
    let kinds: Vec<(&str, &str)> = procs.iter().map(|p| (p.1.as_str(), p.2.as_str())).collect();
    assert_eq!(
        kinds.len(),
        4,
        "the program, its forked child, and the started program's two images: {procs:?}"
    );
    assert!(kinds.contains(&("allocer", "exited")), "{procs:?}");
    assert!(kinds.contains(&("fdreuse", "exec")), "{procs:?}");
    assert_eq!(calls(unit(&r, "fdreuse!use")), (2, 0, 0, 2, 0));
    assert_eq!(calls(unit(&r, "allocer!main")), (1, 0, 0, 1, 0));
    assert!(r["unrecorded"].as_array().unwrap().is_empty());
    assert!(warnings(&r).is_empty(), "{:?}", warnings(&r));
}

/// With the endpoint gone too, a started program cannot reach the recorder: it says so on
/// stderr, and the recording lists it as unrecorded; the forked child is still recorded.
#[test]
fn a_process_that_cannot_reach_the_recorder_is_reported() {
    let (fdreuse, allocer, _) = fdreuse_programs();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cut.tansa");
    let out = record(
        &file,
        &[],
        &[fdreuse.to_str().unwrap(), allocer.to_str().unwrap(), "cut"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot reach the recorder and is not recorded"),
        "{}",
        stderr(&out)
    );
    let r = report_json(&file, &["--by", "function"]);
    assert_eq!(calls(unit(&r, "fdreuse!use")), (2, 0, 0, 2, 0));
    let unrecorded = r["unrecorded"].as_array().unwrap();
    assert_eq!(unrecorded.len(), 1, "{unrecorded:?}");
    assert!(
        unrecorded[0]["exe"].as_str().unwrap().ends_with("/allocer"),
        "{unrecorded:?}"
    );
    assert!(
        warnings(&r)
            .iter()
            .any(|w| w.starts_with("1 process(es) ran without being recorded")),
        "{:?}",
        warnings(&r)
    );
}

/// A statically linked program started by a recorded one runs without the agent: it is
/// listed as unrecorded, with the reason, and its parent's image as replaced.
#[test]
fn a_static_program_started_by_the_tree_is_listed_as_unrecorded() {
    let (fdreuse, _, stat) = fdreuse_programs();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("static.tansa");
    let out = record(
        &file,
        &[],
        &[fdreuse.to_str().unwrap(), stat.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let unrecorded = r["unrecorded"].as_array().unwrap();
    assert_eq!(unrecorded.len(), 1, "{unrecorded:?}");
    assert!(
        unrecorded[0]["exe"]
            .as_str()
            .unwrap()
            .ends_with("allocer-static")
    );
    assert!(
        unrecorded[0]["reason"]
            .as_str()
            .unwrap()
            .contains("did not run the agent"),
        "{unrecorded:?}"
    );
    let replaced = processes(&r).iter().filter(|p| p.2 == "exec").count();
    assert_eq!(replaced, 1, "{:?}", processes(&r));
    // Run directly, it leaves a recording without any process image: the report says so
    // (it showed a "process 0" that never was) and lists the program as unrecorded.
    let alone = dir.path().join("alone.tansa");
    let out = record(&alone, &[], &[stat.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = run_tansa(&["report", alone.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("no process image in this recording") && !text.contains("process 0"),
        "{text}"
    );
    assert!(
        stderr(&table).contains("1 process(es) ran without being recorded"),
        "{}",
        stderr(&table)
    );
}

/// Children started without `pthread_atfork` handlers (dash's `vfork`, glibc's
/// `posix_spawn`) that run a program without the agent are listed as unrecorded. Before,
/// the collector never heard of them: `sh -c` running a static program gave a recording of
/// the shell alone, without a word. `system()` and `popen()` reach them through the shell.
#[test]
fn static_programs_started_by_sh_posix_spawn_system_or_popen_are_listed_as_unrecorded() {
    let (_, _, stat) = fdreuse_programs();
    let spawner = program("spawner", "spawner.c", &["-g", "-O1"]);
    let stat = stat.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let unrecorded_static = |r: &Value, how: &str| -> usize {
        let all = r["unrecorded"].as_array().unwrap();
        for u in all {
            assert!(
                u["exe"].as_str().unwrap().ends_with("allocer-static")
                    && u["reason"].as_str().unwrap().contains(how)
                    && u["reason"]
                        .as_str()
                        .unwrap()
                        .contains("did not run the agent"),
                "{all:?}"
            );
        }
        all.len()
    };

    // /bin/sh is dash on Debian: it starts commands with vfork.
    let file = dir.path().join("sh.tansa");
    let script = format!("{stat}; {stat}; true");
    let out = record(&file, &[], &["/bin/sh", "-c", &script]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    assert_eq!(unrecorded_static(&r, "(vfork)"), 2);
    // Still one image of the shell: vfork is not made a fork.
    assert_eq!(processes(&r).len(), 1, "{:?}", processes(&r));

    // posix_spawn: a static program and a dynamic one; the latter is recorded.
    let file = dir.path().join("spawn.tansa");
    let out = record(&file, &[], &[spawner.to_str().unwrap(), stat, "/bin/true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "spawned 2");
    let r = report_json(&file, &[]);
    assert_eq!(unrecorded_static(&r, "(posix_spawn)"), 1);
    let procs = processes(&r);
    assert!(
        procs.iter().any(|p| p.1 == "true" && p.2 == "exited"),
        "{procs:?}"
    );
    assert!(
        warnings(&r)
            .iter()
            .any(|w| w.starts_with("1 process(es) ran without being recorded")),
        "{:?}",
        warnings(&r)
    );
    // A flame graph passed on says it too.
    let svg = dir.path().join("spawn.svg");
    let out = run_tansa(&[
        "flamegraph",
        file.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("Warning: 1 process(es) ran without being recorded"),
        "{svg}"
    );

    // system() and popen() start /bin/sh through glibc's internal spawn, which the agent
    // does not see; the shell runs the agent, and it starts the static program with vfork.
    let shellout = program("shellout", "shellout.c", &["-g", "-O1"]);
    let file = dir.path().join("shellout.tansa");
    let out = record(&file, &[], &[shellout.to_str().unwrap(), stat]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "system 0 popen 0"
    );
    let r = report_json(&file, &[]);
    assert_eq!(unrecorded_static(&r, "(vfork)"), 2);
    let shells = processes(&r)
        .into_iter()
        .filter(|p| p.1 == "dash" || p.1 == "sh")
        .count();
    assert_eq!(shells, 2, "{:?}", processes(&r));
}

/// A child of `vfork` that ends with `_exit` without executing a program (five at once, one
/// after a failed `exec`, one its parent never waits for, which the recorder reaps) ran
/// nothing unrecorded: no warning. Before, each was listed as started "with a program that
/// did not run the agent: statically linked, set-uid, or started without LD_PRELOAD". The
/// child that does execute a static program still is.
#[test]
fn vfork_children_that_exit_without_exec_are_not_listed_as_unrecorded() {
    let (_, _, stat) = fdreuse_programs();
    let vforker = program("vforker", "vforker.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vfork.tansa");
    let out = record(
        &file,
        &[],
        &[vforker.to_str().unwrap(), stat.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "vforked 8 exec 0"
    );
    let r = report_json(&file, &[]);
    let unrecorded = r["unrecorded"].as_array().unwrap();
    assert_eq!(unrecorded.len(), 1, "{unrecorded:?}");
    assert!(
        unrecorded[0]["exe"]
            .as_str()
            .unwrap()
            .ends_with("allocer-static"),
        "{unrecorded:?}"
    );
    let reason = unrecorded[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("(vfork)") && reason.contains("did not run the agent"),
        "{unrecorded:?}"
    );
    assert!(
        warnings(&r)
            .iter()
            .any(|w| w.starts_with("1 process(es) ran without being recorded")),
        "{:?}",
        warnings(&r)
    );
    // One image: the vfork children ran none of their own.
    assert_eq!(processes(&r).len(), 1, "{:?}", processes(&r));
    // The text report says it once, of the static program alone.
    let table = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(table.status.success(), "{}", stderr(&table));
    let said = stderr(&table);
    assert_eq!(said.matches("did not run the agent").count(), 1, "{said}");
    assert!(said.contains("allocer-static"), "{said}");
}

/// A library constructor that creates a thread before the agent's own constructor ran:
/// the thread is created (no EAGAIN) and recorded, under `tansa record` and under the
/// agent's CPU sampling.
#[test]
fn threads_created_before_the_agent_started_work_and_are_recorded() {
    let lib = build_dir().join("libearly.so");
    compile(
        &lib,
        &[source("libearly.c")],
        &["-shared", "-fPIC", "-g", "-O1", "-pthread"],
    );
    let exe = build_dir().join("early");
    let ldir = format!("-L{}", build_dir().display());
    let rpath = format!("-Wl,-rpath,{}", build_dir().display());
    compile(
        &exe,
        &[source("early.c")],
        &["-g", "-O1", "-pthread", &ldir, "-learly", &rpath],
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("early.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "early 0");
    let r = report_json(&file, &["--by", "function"]);
    assert_eq!(calls(unit(&r, "libearly.so!early_thread")), (1, 0, 0, 1, 0));
    let sampled = dir.path().join("early-cpu.tansa");
    let out = run_tansa(&[
        "sample",
        "--source",
        "agent",
        "-o",
        sampled.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "early 0");
}

/// How each process of a shell's tree really ended: `sh` runs its children and collects
/// their statuses itself, and ends pipeline members with `_exit`.
#[test]
fn the_exit_of_every_process_of_a_shell_is_known() {
    let exe = program("allocer", "allocer.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sh.tansa");
    let script = format!(
        "{a}; {a} | cat >/dev/null; echo hi | cat >/dev/null; (exit 3) || true; sh -c 'exit 5' || true",
        a = exe.display()
    );
    let out = record(&file, &[], &["sh", "-c", &script]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let procs = r["processes"].as_array().unwrap();
    assert!(procs.len() >= 6, "{procs:?}");
    for p in procs {
        let kind = p["exit"]["kind"].as_str().unwrap();
        assert!(
            kind == "exited" || kind == "exec",
            "every process exited (or replaced itself): {p}"
        );
    }
    let codes: Vec<i64> = procs
        .iter()
        .filter(|p| p["exit"]["kind"] == "exited")
        .map(|p| p["exit"]["code"].as_i64().unwrap())
        .collect();
    assert!(codes.contains(&3) && codes.contains(&5), "{codes:?}");
}

/// `free(NULL)` does nothing and is not counted as a release.
#[test]
fn free_of_null_is_not_counted() {
    let exe = program("threadchurn", "threadchurn.c", &["-g", "-O2", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("null.tansa");
    // glibc calls free(NULL) dozens of times at each thread's exit.
    let out = record(&file, &[], &[exe.to_str().unwrap(), "50", "5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let c = &r["totals"]["calls"];
    let allocations = c["malloc"].as_u64().unwrap() + c["calloc"].as_u64().unwrap();
    assert!(
        c["free"].as_u64().unwrap() <= allocations,
        "no more releases than allocations: {c}"
    );
    let null = dumped_records(&file)
        .into_iter()
        .find(|r| r["kind"] == "free" && r["ptr"] == 0);
    assert!(null.is_none(), "no event with a null pointer: {null:?}");
}

/// Blocks allocated by threads that found no ring (the agent limited to 4 rings, 16 worker
/// threads alive at once) and released by the main thread, which has one. Online, those
/// releases are the program's own and go through: before, the agent refused them as
/// releases of pointers never allocated, and the program's memory stayed in use. They are
/// counted as lost with their allocations. Offline, where the agent keeps no table, the
/// report lists them as improper but says the allocations may be among the lost events.
#[test]
fn blocks_of_threads_without_a_ring_are_released_not_refused() {
    const THREADS: u64 = 16;
    const BLOCKS: u64 = 10;
    let exe = program("lostblocks", "lostblocks.c", &["-g", "-O1", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let args = [
        exe.to_str().unwrap(),
        &THREADS.to_string(),
        &BLOCKS.to_string(),
    ];
    // One arena and no per-thread cache, so that glibc's count of bytes in use shows a
    // refused release.
    let env = [
        ("TANSA_TEST_MAX_RINGS", "4"),
        (
            "GLIBC_TUNABLES",
            "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1",
        ),
    ];
    let json = dir.path().join("online.json");
    let out = record_env(
        &json,
        &["--online", "--format", "json"],
        &args.map(|a| a as &str),
        &env,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let held: i64 = said
        .lines()
        .find_map(|l| l.strip_prefix("held "))
        .unwrap_or_else(|| panic!("{said}"))
        .parse()
        .unwrap();
    assert!(
        held < (BLOCKS * 1000) as i64,
        "the program's blocks were all released: {held} bytes still in use"
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["improper"], serde_json::json!([]), "{}", r["improper"]);
    // Each worker makes one realloc: the recorded ones tell how many workers had a ring.
    let with_ring = r["totals"]["calls"]["realloc"].as_u64().unwrap();
    assert!(
        with_ring < THREADS,
        "some workers found no ring: {with_ring}"
    );
    let without = THREADS - with_ring;
    let lost = r["processes"][0]["lost_events"].as_u64().unwrap();
    assert_eq!(
        lost,
        without * (BLOCKS + 1 + BLOCKS),
        "each ringless worker's mallocs and realloc, and the main thread's frees of its \
         blocks: {}",
        r["processes"][0]
    );
    assert_eq!(r["processes"][0]["losses"]["no_ring"].as_u64(), Some(lost));

    let file = dir.path().join("offline.tansa");
    let out = record_env(&file, &[], &args.map(|a| a as &str), &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let lost = r["processes"][0]["lost_events"].as_u64().unwrap();
    assert_eq!(lost, without * (BLOCKS + 1), "{}", r["processes"][0]);
    let improper = r["improper"].as_array().unwrap();
    assert_eq!(improper.len(), 1, "{improper:?}");
    assert_eq!(improper[0]["count"].as_u64(), Some(without * BLOCKS));
    assert_eq!(improper[0]["refused"], false);
    assert_eq!(improper[0]["lost_events"].as_u64(), Some(lost));
    let table = run_tansa(&["report", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains(&format!(
            "free of a pointer not seen allocated ({}), {} time(s)",
            improper[0]["ptr"].as_str().unwrap(),
            without * BLOCKS
        )) && text.contains(&format!(
            "could not record {lost} event(s): the allocation may be one of them"
        )),
        "{text}"
    );
}
