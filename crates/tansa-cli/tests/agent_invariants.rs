//! The invariants written at the top of the agent (crates/tansa-agent/src/lib.rs), each
//! exercised by a real program under the real agent.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// One allocator call: (function, returned or released pointer, size, old pointer).
type Call = (String, u64, u64, u64);

/// Field `name` of a record, an unsigned integer.
fn field(record: &Value, name: &str) -> u64 {
    record[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {record}"))
}

/// Every allocator call recorded in `file`.
fn recorded_calls(file: &Path) -> Vec<Call> {
    let mut calls = Vec::new();
    for r in dumped_records(file) {
        let op = || r["op"].as_str().unwrap().to_string();
        match r["kind"].as_str().unwrap() {
            "alloc" => calls.push((op(), field(&r, "ptr"), field(&r, "size"), 0)),
            "realloc" => calls.push((
                op(),
                field(&r, "new_ptr"),
                field(&r, "size"),
                field(&r, "old_ptr"),
            )),
            "free" => calls.push(("free".to_string(), field(&r, "ptr"), 0, 0)),
            _ => {}
        }
    }
    calls
}

fn record_with_env(file: &Path, cmd: &[&str], env: &[(&str, &str)]) -> Output {
    ensure_agent();
    let mut c = Command::new(tansa());
    c.args(["record", "-o", file.to_str().unwrap(), "--"])
        .args(cmd);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run tansa")
}

/// Invariant 1: the agent allocates nothing through the hooked allocator. A spy allocator
/// preloaded behind the agent sees exactly the calls the program made, each of which the
/// agent recorded, while threads start, stacks are new and a module is loaded.
#[test]
fn the_agent_allocates_nothing_through_the_hooked_allocator() {
    let spy = build_dir().join("spy.so");
    compile(
        &spy,
        &[source("spy.c")],
        &["-shared", "-fPIC", "-O1", "-ldl"],
    );
    let exe = program("spied", "spied.c", &["-g", "-O1", "-pthread", "-ldl"]);
    let plugin = fig3("O0", &["-O0", "-fno-omit-frame-pointer"]).plugin;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spied.tansa");
    let log = dir.path().join("spy.log");
    let out = record_with_env(
        &file,
        &[
            exe.to_str().unwrap(),
            plugin.to_str().unwrap(),
            log.to_str().unwrap(),
        ],
        &[("LD_PRELOAD", spy.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The agent implements reallocarray with the real realloc (glibc's would call back into
    // the hooks), so the spy sees those calls as realloc.
    let mut recorded: HashMap<Call, i64> = HashMap::new();
    for mut c in recorded_calls(&file) {
        if c.0 == "reallocarray" {
            c.0 = "realloc".to_string();
        }
        *recorded.entry(c).or_default() += 1;
    }
    let spied: Vec<Call> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            )
        })
        .collect();
    // 4 threads x 200 iterations x 6 calls, plus the memalign family, plus the plugin.
    assert!(
        spied.len() >= 4 * 200 * 6 + 10 + 100,
        "the window saw the program's calls: {}",
        spied.len()
    );
    let mut unmatched = Vec::new();
    // `free(NULL)` is passed on but, doing nothing, is not recorded (see the agent's hooks).
    for c in spied.iter().filter(|c| !(c.0 == "free" && c.1 == 0)) {
        match recorded.get_mut(c) {
            Some(n) if *n > 0 => *n -= 1,
            _ => unmatched.push(c.clone()),
        }
    }
    assert!(
        unmatched.is_empty(),
        "{} allocator call(s) reached the real allocator without being a recorded program call \
         (made by the agent itself?): {:?}",
        unmatched.len(),
        &unmatched[..unmatched.len().min(10)]
    );
}

/// Invariant 3: malloc and free from a signal handler that keeps interrupting allocations.
#[test]
fn malloc_from_a_signal_handler() {
    let exe = program("signals", "signals.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sig.tansa");
    let n = 100_000u64;
    let out = record(&file, &[], &[exe.to_str().unwrap(), &n.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (handled, looped): (u64, u64) = stdout
        .trim()
        .strip_prefix("handler ")
        .and_then(|s| s.split_once(" loop "))
        .map(|(h, l)| (h.parse().unwrap(), l.parse().unwrap()))
        .expect("handler and loop counts");
    assert!(looped >= n, "{stdout}");
    assert!(
        handled > 100,
        "the timer fired during the loop ({handled} times)"
    );
    let calls = recorded_calls(&file);
    let count =
        |op: &str, size: u64| calls.iter().filter(|c| c.0 == op && c.2 == size).count() as u64;
    // One warm-up allocation of each size precedes the timer (see signals.c).
    assert_eq!(
        count("malloc", 55),
        looped + 1,
        "every allocation of the loop"
    );
    assert_eq!(
        count("malloc", 33),
        handled + 1,
        "every allocation of the handler"
    );
    let r = report_json(&file, &[]);
    assert_nothing_improper(&r);
    // A handler that interrupts the agent while it writes or unwinds cannot unwind itself:
    // its event is queued without a stack ([unknown]). Every other event has its stack.
    // Nothing is lost, and the report says how many events lack their stack.
    let exe_unit = unit(&r, "signals");
    let stackless = if has_unit(&r, "[unknown]") {
        unit(&r, "[unknown]")["calls"]["malloc"].as_u64().unwrap()
    } else {
        0
    };
    let warnings: Vec<&str> = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    let said: u64 = warnings
        .iter()
        .find_map(|w| {
            w.strip_suffix(" event(s) recorded without their call stack (charged to [unknown])")
        })
        .map_or(0, |n| n.parse().unwrap());
    assert!(
        warnings.len() <= 1 && said >= stackless && (said > 0) == (warnings.len() == 1),
        "only the count of events without a stack ({stackless} mallocs in [unknown]): {warnings:?}"
    );
    // Every malloc is in the report once: the program's, [unknown], and, for a handler whose
    // stack was unwound through the signal frame into a shared library, that library's.
    let all_mallocs: u64 = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["calls"]["malloc"].as_u64().unwrap())
        .sum();
    assert_eq!(all_mallocs, looped + handled + 2, "{}", r["units"]);
    assert!(exe_unit["calls"]["malloc"].as_u64().unwrap() > looped);
    assert!(
        stackless < handled,
        "handlers that find the thread idle record their stack"
    );
    assert_eq!(r["totals"]["net_bytes"], 0);
}

/// Invariant 4: fork while other threads are inside hooks; each child has its own stream.
#[test]
fn fork_while_other_threads_allocate() {
    let exe = program("forkstress", "forkstress.c", &["-g", "-O1", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fork.tansa");
    let forks = 20;
    let out = record(&file, &[], &[exe.to_str().unwrap(), &forks.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(procs.len(), forks + 1, "one session per child");
    let parent = procs[0]["pid"].as_u64().unwrap();
    for child in &procs[1..] {
        let pid = child["pid"].as_u64().unwrap();
        let rc = report_json(&file, &["--pid", &pid.to_string(), "--by", "function"]);
        let main = unit(&rc, "forkstress!main");
        assert_eq!(bytes(main), (4321, 0, 4321, 0), "child {pid} of {parent}");
        assert_eq!(calls(main), (1, 0, 0, 1, 0));
        assert_nothing_improper(&rc);
    }
    assert_nothing_improper(&r);
}

/// Invariant 5: a dlopen/dlclose storm while other threads allocate.
#[test]
fn dlopen_storm() {
    let exe = program("dlstorm", "dlstorm.c", &["-g", "-O1", "-pthread", "-ldl"]);
    let plugin = fig3("O0", &["-O0", "-fno-omit-frame-pointer"]).plugin;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("storm.tansa");
    let rounds = 150;
    let out = record(
        &file,
        &[],
        &[
            exe.to_str().unwrap(),
            plugin.to_str().unwrap(),
            &rounds.to_string(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let cycle = unit(&r, "libplug.so!plug_cycle");
    let n = 2 * rounds as i64;
    assert_eq!(bytes(cycle), (96 * n, 0, bytes(cycle).2, 0));
    assert_eq!(calls(cycle), (n as u64, 0, 0, n as u64, 0));
    assert_nothing_improper(&r);
}

/// Invariant 6: threads exiting, and freeing from TLS destructors after the agent's own
/// thread-exit handler.
#[test]
fn threads_exiting_mid_stream() {
    let exe = program("threadexit", "threadexit.c", &["-g", "-O1", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exit.tansa");
    let threads = 64;
    let out = record(&file, &[], &[exe.to_str().unwrap(), &threads.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let f = unit(&r, "threadexit!short_lived");
    let n = threads as i64;
    assert_eq!(
        bytes(f),
        (300 * n, 0, bytes(f).2, 0),
        "every block released, including by destructors"
    );
    assert_eq!(calls(f), (2 * n as u64, 0, 0, 2 * n as u64, 0));
    assert_nothing_improper(&r);
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
}

/// Invariant 11: the agent brings no library of its own. A program under the agent maps
/// no shared library but libc, the dynamic loader and the agent (it mapped `libgcc_s.so.1`
/// and `libm.so.6` too), and the agent exports its hooks only: none of the unwinder it
/// carries, which would take the place of the program's own. A C++ program's exceptions
/// still unwind through frames that allocate.
#[test]
fn the_agent_brings_no_library_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("maps.tansa");
    let out = record_with_env(&file, &["cat", "/proc/self/maps"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let maps = String::from_utf8_lossy(&out.stdout);
    let libraries: std::collections::BTreeSet<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .filter(|name| name.contains(".so"))
        .collect();
    assert!(
        libraries.contains("libtansa_agent.so"),
        "the agent is not loaded: {libraries:?}\n{maps}"
    );
    let others: Vec<&&str> = libraries
        .iter()
        .filter(|n| !n.starts_with("libc.so") && !n.starts_with("ld-linux"))
        .filter(|n| **n != "libtansa_agent.so")
        .collect();
    assert!(others.is_empty(), "the agent brought {others:?}:\n{maps}");

    use object::{Object, ObjectSymbol};
    let agent = tansa().with_file_name("libtansa_agent.so");
    let data = std::fs::read(&agent).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let exported: Vec<String> = elf
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    assert!(exported.iter().any(|n| n == "malloc"), "{exported:?}");
    let foreign: Vec<&String> = exported
        .iter()
        .filter(|n| {
            n.starts_with("_Unwind")
                || n.starts_with("__register_frame")
                || n.starts_with("__emutls")
        })
        .collect();
    assert!(foreign.is_empty(), "the agent exports {foreign:?}");

    // The program's exceptions are thrown and caught by its own unwinder, through frames
    // whose allocations are recorded, beside the agent's private copy.
    let throws = program("throws", "throws.cpp", &["-g", "-O1"]);
    let file = dir.path().join("throws.tansa");
    let out = record_with_env(&file, &[throws.to_str().unwrap(), "2000"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "caught 2000");
    let r = report_json(&file, &["--by", "function"]);
    let thrown = unit(&r, "libstdc++.so.6!__cxa_allocate_exception");
    assert_eq!(calls(thrown), (2000, 0, 0, 2000, 0), "{thrown}");
}

/// Invariant 10: time order is causal order. The main thread first allocates alone (its
/// allocations then take an unordered timestamp), then passes each block it allocates to a
/// second thread that frees it; with glibc's per-thread cache off, the main thread's
/// allocations reuse the addresses the other thread has just released. In time order,
/// every release must come before the allocation that reuses its address. (A release
/// timestamped 200 spins after it is made fails here every time; the few nanoseconds an
/// unordered read of the clock can run early are too few to show.)
#[test]
fn blocks_released_by_one_thread_and_reused_by_another_keep_their_order() {
    let exe = program("handoff", "handoff.c", &["-g", "-O1", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("handoff.tansa");
    let (solo, count) = (20_000u64, 200_000u64);
    let out = record_with_env(
        &file,
        &[exe.to_str().unwrap(), &solo.to_string(), &count.to_string()],
        &[("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let main = unit(&r, "handoff!main");
    let n = solo + count;
    assert_eq!(calls(main), (n, 0, 0, n, 0), "every malloc and free");
    assert_eq!(bytes(main).0, 48 * n as i64);
    assert_eq!(bytes(main).1, 0, "every block released");
    assert_nothing_improper(&r);
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
    // The same check on the raw records, and proof that addresses did change threads.
    let mut events: Vec<(u64, bool, (u64, u64), u64)> = dumped_records(&file)
        .iter()
        .filter(|e| matches!(e["kind"].as_str(), Some("alloc" | "free")))
        .map(|e| {
            (
                field(e, "ticks"),
                e["kind"] == "alloc",
                (field(e, "session"), field(e, "ptr")),
                field(e, "tid"),
            )
        })
        .collect();
    events.sort_by_key(|e| e.0);
    // (Process image, address) -> (live, thread of its last release).
    let mut blocks: HashMap<(u64, u64), (bool, u64)> = HashMap::new();
    let mut handed_over = 0u64;
    for (ticks, alloc, ptr, tid) in events {
        let b = blocks.entry(ptr).or_insert((false, 0));
        if alloc {
            assert!(!b.0, "{:#x} handed out at {ticks} while still live", ptr.1);
            handed_over += u64::from(b.1 != 0 && b.1 != tid);
            b.0 = true;
        } else {
            b.0 = false;
            b.1 = tid;
        }
    }
    assert!(
        handed_over >= count / 2,
        "only {handed_over} allocations reused an address another thread released"
    );
}

/// The stack table takes no lock, so threads meeting the same new stack at the same moment
/// may each define it under an id of its own; the reader gives all of them the first id.
/// 16 threads released together by a barrier meet 60 new stacks: each is one leak site
/// with its 16 blocks (in 8 runs of 8 here, every run had such duplicate definitions; the
/// 10,000-thread leak check test split one site this way once in some 40 runs), and, under
/// `record --online`, one row of 16 refused calls.
#[test]
fn threads_meeting_the_same_new_stack_at_once_make_one_site() {
    let exe = program("stack_race", "stack_race.c", &["-g", "-O1", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("race.tansa");
    let (threads, rounds) = (16u64, 60u64);
    let out = record(
        &file,
        &[],
        &[
            exe.to_str().unwrap(),
            &threads.to_string(),
            &rounds.to_string(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mut definitions: HashMap<String, u64> = HashMap::new();
    for r in dumped_records(&file) {
        if r["kind"] == "stack" {
            *definitions.entry(r["frames"].to_string()).or_default() += 1;
        }
    }
    let twice: u64 = definitions.values().map(|n| n - 1).sum();
    eprintln!("stacks defined again by a racing thread: {twice}");
    let out = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let deep: Vec<(usize, u64)> = report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"] == "stack_race!deep")
        .map(|s| {
            (
                s["stack"].as_array().unwrap().len(),
                s["allocations"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut depths: Vec<usize> = deep.iter().map(|d| d.0).collect();
    depths.sort_unstable();
    depths.dedup();
    assert_eq!(depths.len() as u64, rounds, "{deep:?}");
    assert_eq!(
        deep.len() as u64,
        rounds,
        "a stack split in sites: {deep:?}"
    );
    assert!(deep.iter().all(|d| d.1 == threads), "{deep:?}");
    // Online mode, which aggregates events as their definitions come: each thread frees a
    // pointer never allocated at each new stack, and every stack is one row of refused
    // calls, of one call per thread.
    let online = dir.path().join("online.json");
    let out = run_tansa(&[
        "record",
        "--online",
        "--format",
        "json",
        "-o",
        online.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        &threads.to_string(),
        &rounds.to_string(),
        "refused",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&std::fs::read(&online).unwrap()).unwrap();
    let refused: Vec<u64> = report["improper"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["refused"] == true && i["stack"][0]["function"] == "deep")
        .map(|i| i["count"].as_u64().unwrap())
        .collect();
    assert_eq!(
        refused.len() as u64,
        rounds,
        "a stack split in rows: {refused:?}"
    );
    assert!(refused.iter().all(|&n| n == threads), "{refused:?}");
}

/// Invariant 6 at the scale of a thread-per-request server: the rings of exited threads
/// are reclaimed and reused, so 100,000 short-lived threads, one after another, are
/// recorded exactly (each thread also frees memory after the agent's own exit handler).
#[test]
fn a_hundred_thousand_threads_one_after_another_are_recorded_exactly() {
    churn_is_recorded_exactly(100_000, 1, &[]);
}

/// The same, 8 threads alive at a time.
#[test]
fn a_hundred_thousand_threads_eight_at_a_time_are_recorded_exactly() {
    churn_is_recorded_exactly(100_000, 8, &[]);
}

/// 10,000 threads alive at the same time: the segments grow to hold a ring each.
#[test]
fn ten_thousand_threads_alive_at_once_are_recorded_exactly() {
    churn_is_recorded_exactly(10_000, 10_000, &[]);
}

/// A long run through small rings: 2,000,000 events wrap a 64 KiB ring hundreds of times
/// while the collector drains it; every event arrives.
#[test]
fn a_long_run_through_small_rings_loses_nothing() {
    let exe = program("orphan", "orphan.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.tansa");
    let rounds = 1_000_000u64;
    let out = record(
        &file,
        &["--ring-kb", "64"],
        &[exe.to_str().unwrap(), &rounds.to_string(), "now"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    assert_eq!(calls(unit(&r, "orphan!main")), (rounds, 0, 0, rounds, 0));
    assert_eq!(r["process"]["lost_events"], 0);
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
}
