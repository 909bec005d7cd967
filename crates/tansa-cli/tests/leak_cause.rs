//! Leak-cause localization (seed 001) end to end: `tansa record --leak-cause` on the spec's
//! worked example (§19) at -O0 and at -O2 without frame pointers, then `tansa leaks`: the
//! leaking site, its range end, the cause function (funcB) and the cause branch (the
//! `error_condition_1` test), reported the same whether the branch jumped or not; sites
//! always freed or never freed are not leaking and get no cause; other threads allocate at
//! the traced site meanwhile; a forked child that leaked early is judged over its own life;
//! two recordings read as one keep each one's causes; bad input gets one clear line.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// Leak-cause mode, judging sites every 10 ms: the worked example's 400,000 requests take
/// about 120 ms on an idle machine, too few of the default 50 ms scans for three rises in a
/// row, so nothing was traced there (under load it took long enough).
const LEAK_CAUSE: &[&str] = &["--leak-cause", "--scan-interval", "10ms"];

fn leakcause(variant: &str) -> PathBuf {
    match variant {
        "O0" => program("leakcause-O0", "leakcause.c", &["-g", "-pthread", "-O0"]),
        _ => program(
            "leakcause-O2",
            "leakcause.c",
            &["-g", "-pthread", "-O2", "-fomit-frame-pointer"],
        ),
    }
}

/// The line of the test program `src` holding `marker`.
fn line_of(src: &str, marker: &str) -> u64 {
    let text = std::fs::read_to_string(source(src)).unwrap();
    text.lines().position(|l| l.contains(marker)).unwrap() as u64 + 1
}

/// The names of a site's cause functions.
fn cause_functions(s: &Value) -> Vec<&str> {
    s["cause_functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"].as_str().unwrap())
        .collect()
}

/// Records `exe args` with --leak-cause and returns the `tansa leaks` JSON.
fn record_and_report(dir: &Path, exe: &Path, args: &[&str]) -> Value {
    let file = dir.join("leaks.tansa");
    let mut cmd = vec![exe.to_str().unwrap()];
    cmd.extend_from_slice(args);
    let out = record(&file, LEAK_CAUSE, &cmd);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("done {}", args[0]),
        "the program's output is unchanged"
    );
    leaks_json(&file)
}

/// `tansa leaks FILE --format json`.
fn leaks_json(file: &Path) -> Value {
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn site<'a>(r: &'a Value, function_suffix: &str) -> &'a Value {
    r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["site"]["function"]
                .as_str()
                .unwrap()
                .ends_with(function_suffix)
        })
        .unwrap_or_else(|| panic!("no site in {function_suffix}: {r:#}"))
}

fn check_diagnosis(r: &Value, exe: &str) {
    assert_eq!(r["schema"], "tansa.leaks.v1");
    assert_eq!(r["leak_cause"], true);
    let s = site(r, "!funcA");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert!(s["leaked_blocks"].as_u64().unwrap() > 0);
    assert_eq!(s["range_end"], format!("{exe}!funcA"), "{s:#}");
    assert!(s["traces"]["freed"].as_u64().unwrap() >= 1, "{s:#}");
    assert!(s["traces"]["not_freed"].as_u64().unwrap() >= 1, "{s:#}");
    let causes = cause_functions(s);
    assert_eq!(causes, [format!("{exe}!funcB")], "{s:#}");
    let branches = s["cause_branches"].as_array().unwrap();
    assert_eq!(branches.len(), 1, "{s:#}");
    let b = &branches[0];
    // What the traces showed, for the messages below.
    let evidence = format!(
        "tracing {}, traces {}, paths {:#}",
        s["tracing"], s["traces"], s["paths"]
    );
    assert_eq!(b["function"], format!("{exe}!funcB"));
    // The `if (error_condition_1)` line; optimized line tables may give the conditional
    // jump the line of the statement it guards, the next one.
    let line = b["line"].as_u64().unwrap();
    let marker = line_of("leakcause.c", "location2, the leak");
    assert!(
        line == marker || line == marker + 1,
        "line {marker}: {b:#}, {evidence}"
    );
    assert!(b["file"].as_str().unwrap().ends_with("leakcause.c"));
    assert!(!b["instruction"].as_str().unwrap().is_empty());
    // The same branch ran on freeing paths in the other direction: a branch is one symbol
    // whether it jumped or not (the block-stepping trap of the issue).
    let taken = b["taken_on_leak"].as_bool().unwrap();
    let symbol = format!("@{exe}!funcB+{:#x}", b["offset"].as_u64().unwrap());
    let opposite = format!("{symbol} {}", if taken { "not-taken" } else { "taken" });
    let freed_with_opposite = s["paths"].as_array().unwrap().iter().any(|p| {
        p["end"] == "F"
            && p["steps"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| *t == opposite)
    });
    assert!(freed_with_opposite, "{opposite} on a freeing path: {s:#}");
    // Sites always freed, or never freed, are not leaking and get no cause. With several
    // threads, the always-freed site's outstanding blocks go up and down at random between
    // scans, and three rises in a row make the live judgement trace it for a while: then
    // every traced allocation was freed (F), and no cause is found.
    for (name, judgement) in [("!scratch", "freed"), ("!remember", "no-free-site")] {
        let other = site(r, name);
        assert_eq!(other["judgement"], judgement, "{other:#}");
        assert!(other["cause_functions"].as_array().unwrap().is_empty());
        assert!(other["cause_branches"].as_array().unwrap().is_empty());
        if !other["range_end"].is_null() {
            assert_eq!(
                name, "!scratch",
                "a never-freed site has no range: {other:#}"
            );
            assert_eq!(other["traces"]["not_freed"], 0, "{other:#}");
        }
    }
}

#[test]
fn the_worked_example_at_o0() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O0");
    let r = record_and_report(dir.path(), &exe, &["400000"]);
    check_diagnosis(&r, "leakcause-O0");
    // Two recordings read as one (as a job's ranks are): each keeps its own tracing, so
    // the leaking site of either process gets its causes.
    let second = dir.path().join("second.tansa");
    let out = record(&second, LEAK_CAUSE, &[exe.to_str().unwrap(), "400000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = dir.path().join("leaks.tansa");
    let o = run_tansa(&[
        "leaks",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let both: Value = serde_json::from_slice(&o.stdout).unwrap();
    let leaking: Vec<&Value> = both["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"] == "leakcause-O0!funcA")
        .collect();
    let sessions: std::collections::BTreeSet<u64> = leaking
        .iter()
        .map(|s| s["session"].as_u64().unwrap())
        .collect();
    assert_eq!(sessions.len(), 2, "one site per process: {leaking:#?}");
    for s in leaking {
        assert_eq!(s["judgement"], "leaking", "{s:#}");
        assert_eq!(s["range_end"], "leakcause-O0!funcA", "{s:#}");
        assert_eq!(
            s["cause_functions"][0]["function"], "leakcause-O0!funcB",
            "{s:#}"
        );
        assert_eq!(s["cause_branches"][0]["function"], "leakcause-O0!funcB");
    }
    // One file given twice, under its name or through a link, would count every event
    // twice: refused, as is any wrong command line.
    let link = dir.path().join("link.tansa");
    std::os::unix::fs::symlink(&first, &link).unwrap();
    for again in [&first, &link] {
        for command in ["leaks", "report"] {
            let o = run_tansa(&[command, first.to_str().unwrap(), again.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(2), "{command}: {}", stderr(&o));
            assert!(
                stderr(&o).contains(&format!("{} is given twice", first.display())),
                "{command}: {}",
                stderr(&o)
            );
        }
    }
}

/// The agent's table of stacks takes no lock: two threads meeting a new stack at the same
/// moment each define it. The events of such a site come under both ids, and the agent may
/// trace it under either. Here the worked example's leaking site is given a second
/// definition, half its allocations and its tracing move to that id (a recording rewritten
/// as such a race leaves it): `tansa leaks` still shows one site, with every allocation
/// and its cause.
#[test]
fn a_traced_site_defined_twice_is_one_site_with_its_cause() {
    use tansa_format::memory::{LEAK_CAUSE, LeakCause, META_CHUNK, THREAD_CHUNK};
    use tansa_fuzz::craft::Recording;
    use tansa_wire::event::{ByteSink, Decoder, Record, StackFrame, Tag, encode_stack_def};
    struct Bytes(Vec<u8>);
    impl ByteSink for Bytes {
        fn put(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O0");
    let before = record_and_report(dir.path(), &exe, &["400000"]);
    check_diagnosis(&before, "leakcause-O0");
    let leaking = site(&before, "!funcA");
    let (session, stack) = (
        leaking["session"].as_u64().unwrap() as u32,
        leaking["stack_id"].as_u64().unwrap() as u32,
    );
    let file = dir.path().join("leaks.tansa");
    let mut rec = Recording::decode(&std::fs::read(&file).unwrap()).unwrap();
    rec.unchunk();
    // The second definition, after every other one of the session.
    let meta = rec
        .frames
        .iter_mut()
        .find(|f| f.ty == META_CHUNK && f.payload[..4] == session.to_le_bytes())
        .expect("the session's definitions");
    let mut frames: Option<Vec<StackFrame>> = None;
    let mut last = 0;
    for r in Decoder::new(&meta.payload[4..]) {
        if let Ok(Record::StackDef { id, frames: f }) = r {
            last = last.max(id);
            if id == stack {
                frames = Some(f.collect());
            }
        }
    }
    let again = last + 1;
    let mut def = Bytes(Vec::new());
    encode_stack_def(
        &mut def,
        again,
        frames.expect("the site's stack").into_iter(),
    );
    meta.payload.extend_from_slice(&def.0);
    // Every other allocation at the site, and its tracing, under the new id.
    let mut n = 0u64;
    let moved = rec.rewrite_field(THREAD_CHUNK, &[Tag::Malloc, Tag::Calloc], 3, |id| {
        n += u64::from(id == u64::from(stack));
        (id == u64::from(stack) && n.is_multiple_of(2)).then_some(u64::from(again))
    });
    assert!(moved > 10, "{moved} allocations moved");
    let cause = rec
        .frames
        .iter_mut()
        .find(|f| f.ty == LEAK_CAUSE)
        .expect("the leak cause frame");
    let mut traced: LeakCause = postcard::from_bytes(&cause.payload).unwrap();
    let t = traced
        .sites
        .iter_mut()
        .find(|t| (t.session, t.stack) == (session, stack))
        .expect("the site was traced");
    t.stack = again;
    cause.payload = postcard::to_stdvec(&traced).unwrap();
    let crafted = dir.path().join("twice.tansa");
    std::fs::write(&crafted, rec.encode(true)).unwrap();
    let after = leaks_json(&crafted);
    check_diagnosis(&after, "leakcause-O0");
    let sites: Vec<&Value> = after["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"] == "leakcause-O0!funcA")
        .collect();
    assert_eq!(sites.len(), 1, "{sites:#?}");
    for field in ["allocations", "frees", "leaked_blocks", "leaked_bytes"] {
        assert_eq!(sites[0][field], leaking[field], "{field}");
    }
    assert_eq!(sites[0]["cause_branches"], leaking["cause_branches"]);
}

/// The same race, live: with `TANSA_TEST_THREAD_STACKS=1` each of the four worker threads
/// defines every stack it meets under an id of its own, as threads meeting a new stack at
/// the same moment do. The sink judges and traces the leaking site once, under its first
/// id, and the agent hands over allocations made under any of the four (`trace_aliases`).
/// Before, each id was a site of its own, judged and traced apart: the recording held
/// four traced `funcA` sites, three under ids `tansa leaks` shows as none of its sites.
#[test]
fn a_site_each_thread_defined_is_traced_as_one_site() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O2");
    let file = dir.path().join("leaks.tansa");
    let out = record_env(
        &file,
        LEAK_CAUSE,
        &[exe.to_str().unwrap(), "500000", "4"],
        &[("TANSA_TEST_THREAD_STACKS", "1")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    check_diagnosis(&r, "leakcause-O2");
    let s = site(&r, "!funcA");
    assert_eq!(
        s["allocations"],
        4 * 500_000,
        "every allocation is the site's"
    );
    // The sites the recording traced, as `tansa dump` lists them.
    let dump = run_tansa(&["dump", file.to_str().unwrap()]);
    assert!(dump.status.success(), "{}", stderr(&dump));
    let text = String::from_utf8(dump.stdout).unwrap();
    let traced: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("session ")?;
            let (session, rest) = rest.split_once(" stack ")?;
            let (stack, rest) = rest.split_once(": ")?;
            rest.contains("trace(s)")
                .then(|| (session.parse().unwrap(), stack.parse().unwrap()))
        })
        .collect();
    let sites: Vec<(u64, u64)> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_u64().unwrap(),
                s["stack_id"].as_u64().unwrap(),
            )
        })
        .collect();
    let funca = (
        s["session"].as_u64().unwrap(),
        s["stack_id"].as_u64().unwrap(),
    );
    assert_eq!(
        traced.iter().filter(|&&t| t == funca).count(),
        1,
        "funcA traced once: {traced:?}\n{text}"
    );
    for t in &traced {
        assert!(
            sites.contains(t),
            "traced under an id of no site: {t:?} {sites:?}"
        );
    }
}

#[test]
fn the_worked_example_at_o2_without_frame_pointers() {
    let dir = tempfile::tempdir().unwrap();
    let r = record_and_report(dir.path(), &leakcause("O2"), &["600000"]);
    check_diagnosis(&r, "leakcause-O2");
}

/// C++: the worked example compiled as C++, whose symbols are mangled. The range end, the
/// cause function and the branch are named as the stacks name them (`funcB(char*)`).
/// Before, they were the raw symbols (`leakcause-cpp!_Z5funcBPc`).
#[test]
fn cpp_cause_functions_are_demangled() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("leakcause.cpp");
    std::fs::copy(source("leakcause.c"), &src).unwrap();
    let exe = dir.path().join("leakcause-cpp");
    compile(
        &exe,
        &[src],
        &["-g", "-pthread", "-O0", "-fpermissive", "-w"],
    );
    let r = record_and_report(dir.path(), &exe, &["400000"]);
    let s = site(&r, "!funcA()");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert_eq!(s["range_end"], "leakcause-cpp!funcA()", "{s:#}");
    let causes = cause_functions(s);
    assert_eq!(causes, ["leakcause-cpp!funcB(char*)"], "{s:#}");
    assert_eq!(
        s["cause_branches"][0]["function"], "leakcause-cpp!funcB(char*)",
        "{s:#}"
    );
}

/// Leaks through allocation wrappers (`wrapped.cpp`): `make` mallocs a block for `handle`,
/// and `request`'s `new` allocates in libstdc++'s `operator new`; the callers decide
/// whether the block is freed. Each site is named where it is made (`request(long)`, not
/// `operator new`), its range ends at the return of the caller that frees, and the cause
/// branch is found in that caller. Before: every `new` site was named `operator new`
/// (three C++ sites of one program had the same name); a caller's branches were never
/// collected, because its activation began before the trace; and each trace taken before
/// the range moved up from the wrapper moved it once more, to `main`, whose traces then
/// ran out of steps (no cause at all). A block leaked by an exception thrown past its
/// `delete` is traced to the throwing branch; before, the follower waited for the throw to
/// return, which it never does, and one trace ran to the end of the program.
#[test]
fn leaks_through_allocation_wrappers_are_traced_to_the_callers_branch() {
    for (name, opt) in [("wrapped-O0", "-O0"), ("wrapped-O2", "-O2")] {
        let dir = tempfile::tempdir().unwrap();
        let exe = program(name, "wrapped.cpp", &["-g", opt, "-fomit-frame-pointer"]);
        let r = record_and_report(dir.path(), &exe, &["400000"]);
        // (site, range end, cause function, the cause branch's marker, through `new`)
        for (function, caller, cause, marker, through_new) in [
            (
                "make(int)",
                "handle()",
                "handle()",
                "handle's error condition",
                false,
            ),
            (
                "request(long)",
                "request(long)",
                "request(long)",
                "request's error condition",
                true,
            ),
            // Left by an exception thrown in `validate`, caught in `main`.
            (
                "transact(long)",
                "transact(long)",
                "validate(long)",
                "validate's error condition",
                true,
            ),
        ] {
            let s = site(&r, &format!("!{function}"));
            let evidence = format!(
                "{name}: tracing {}, traces {}, range {} moved {}, paths {:#}",
                s["tracing"], s["traces"], s["range_end"], s["range_moves"], s["paths"]
            );
            assert_eq!(s["judgement"], "leaking", "{s:#}");
            let site_frame = s["site_frame"].as_u64().unwrap() as usize;
            assert_eq!(site_frame > 0, through_new, "{s:#}");
            if through_new {
                let entry = s["stack"][0]["function"].as_str().unwrap();
                assert!(entry.contains("operator new"), "{s:#}");
                assert_eq!(s["stack"][site_frame], s["site"]);
                // The paths name libstdc++ as the stack does (the loader's name,
                // `libstdc++.so.6`, not the file's, `libstdc++.so.6.0.30`).
                let exit = format!("{entry}-E");
                let steps = || {
                    s["paths"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .flat_map(|p| p["steps"].as_array().unwrap())
                };
                assert!(steps().any(|t| *t == exit), "{exit} in {evidence}");
            }
            assert_eq!(s["range_end"], format!("{name}!{caller}"), "{evidence}");
            // From the wrapper (or `operator new`, before any free stack was known) one
            // caller up, once.
            assert!(s["range_moves"].as_u64().unwrap() <= 1, "{evidence}");
            assert!(
                s["traces"]["not_freed"].as_u64().unwrap() >= 1,
                "{evidence}"
            );
            let causes = cause_functions(s);
            assert_eq!(causes, [format!("{name}!{cause}")], "{evidence}");
            let branches = s["cause_branches"].as_array().unwrap();
            assert_eq!(branches.len(), 1, "{evidence}");
            assert_eq!(branches[0]["function"], format!("{name}!{cause}"));
            let line = branches[0]["line"].as_u64().unwrap();
            let want = line_of("wrapped.cpp", marker);
            assert!(
                line == want || line == want + 1,
                "line {want}: {:#}, {evidence}",
                branches[0]
            );
        }
        // The text view names the `new` site by its function, and says how it allocated.
        let o = run_tansa(&["leaks", dir.path().join("leaks.tansa").to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains(&format!("leaking: {name}!request(long)")),
            "{text}"
        );
        assert!(
            text.contains("through libstdc++.so.6!operator new"),
            "{text}"
        );
        assert!(!text.contains("leaking: libstdc++"), "{text}");
    }
}

/// Leaks of blocks grown by `realloc` and `reallocarray`: a grown block's site is the
/// reallocation's stack (the small block it replaced was released by it, so the `malloc`
/// site is always freed), traced from the reallocation's return as a `malloc`'s is, to the
/// branch that keeps the block. Before, the agent handed no reallocation over to the
/// tracer: such a site was never traced however long the run, and the text said that a
/// longer run would trace it.
#[test]
fn leaks_of_reallocated_blocks_are_traced_to_their_branch() {
    let dir = tempfile::tempdir().unwrap();
    let exe = program("reallocleak", "reallocleak.c", &["-g", "-O1"]);
    let rounds: u64 = 1500;
    let r = record_and_report(dir.path(), &exe, &["1500"]);
    let at = |function: &str, line: u64| -> &Value {
        r["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["site"]["function"] == format!("reallocleak!{function}")
                    && s["site"]["line"] == line
            })
            .unwrap_or_else(|| panic!("no site at {function}:{line}: {r:#}"))
    };
    for (function, call, leak, every, at_round) in [
        ("grow", "grow's realloc", "grow's leak", 8, 3),
        (
            "grow_array",
            "grow_array's reallocarray",
            "grow_array's leak",
            5,
            1,
        ),
    ] {
        let line = line_of("reallocleak.c", call);
        // The small block each round starts with: released by the reallocation.
        let small = at(function, line - 1);
        assert_eq!(small["judgement"], "freed", "{small:#}");
        assert_eq!(small["allocations"], rounds, "{small:#}");
        assert_eq!(small["frees"], rounds, "{small:#}");
        let s = at(function, line);
        let leaked = (0..rounds).filter(|i| i % every == at_round).count() as u64;
        let evidence = format!(
            "{function}: tracing {}, traces {}, range {}, paths {:#}",
            s["tracing"], s["traces"], s["range_end"], s["paths"]
        );
        assert_eq!(s["judgement"], "leaking", "{s:#}");
        assert_eq!(s["allocations"], rounds, "{s:#}");
        assert_eq!(s["frees"], rounds - leaked, "{s:#}");
        assert_eq!(s["leaked_blocks"], leaked, "{s:#}");
        assert_eq!(
            s["range_end"],
            format!("reallocleak!{function}"),
            "{evidence}"
        );
        assert!(s["traces"]["freed"].as_u64().unwrap() >= 1, "{evidence}");
        assert!(
            s["traces"]["not_freed"].as_u64().unwrap() >= 1,
            "{evidence}"
        );
        assert_eq!(
            cause_functions(s),
            [format!("reallocleak!{function}")],
            "{evidence}"
        );
        let branches = s["cause_branches"].as_array().unwrap();
        assert_eq!(branches.len(), 1, "{evidence}");
        assert_eq!(branches[0]["function"], format!("reallocleak!{function}"));
        let got = branches[0]["line"].as_u64().unwrap();
        let want = line_of("reallocleak.c", leak);
        assert!(
            got == want || got == want + 1,
            "line {want}: {:#}, {evidence}",
            branches[0]
        );
    }
    let o = run_tansa(&["leaks", dir.path().join("leaks.tansa").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("not traced"), "{text}");
}

/// Traces longer than `--trace-steps` are given up: the site says so (`failed`, "every
/// trace of it failed"), and the note says how many traces failed alike and how to follow
/// longer paths. Before, the site said it was judged leaking only as the program ended,
/// and the same note was repeated once per trace, up to 16 times, the rest uncounted.
#[test]
fn traces_given_up_are_counted_and_say_how_to_follow_longer_paths() {
    let dir = tempfile::tempdir().unwrap();
    let exe = program(
        "wrapped-O0",
        "wrapped.cpp",
        &["-g", "-O0", "-fomit-frame-pointer"],
    );
    let file = dir.path().join("leaks.tansa");
    // `handle` runs some 30,000 instructions between the allocation and its fate.
    let mut options = LEAK_CAUSE.to_vec();
    options.extend(["--trace-steps", "1000", "--traces", "20"]);
    let out = record(&file, &options, &[exe.to_str().unwrap(), "30000", "3000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    let s = site(&r, "!make(int)");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert_eq!(s["tracing"], "failed", "{s:#}");
    assert_eq!(s["traces"]["freed"], 0, "{s:#}");
    assert_eq!(s["traces"]["not_freed"], 0, "{s:#}");
    let failures: Vec<&str> = r["trace_failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let given_up = failures
        .iter()
        .find(|f| f.contains("more than 1000 instructions"))
        .unwrap_or_else(|| panic!("{failures:?}"));
    assert!(given_up.contains("--trace-steps"), "{given_up}");
    let n: u64 = given_up
        .rsplit_once(" (")
        .and_then(|(_, n)| n.strip_suffix(" traces)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count of traces: {given_up}"));
    assert!((2..=20).contains(&n), "{given_up}");
    let o = run_tansa(&["leaks", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("not traced: every trace of it failed"),
        "{text}"
    );
    assert_eq!(
        text.matches("more than 1000 instructions").count(),
        1,
        "{text}"
    );
}

#[test]
fn other_threads_allocate_at_the_traced_site() {
    let dir = tempfile::tempdir().unwrap();
    let r = record_and_report(dir.path(), &leakcause("O2"), &["500000", "4"]);
    check_diagnosis(&r, "leakcause-O2");
    assert!(r["trace_failures"].as_array().unwrap().is_empty(), "{r:#}");
}

#[test]
fn the_text_view_reads_as_a_diagnosis() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O0");
    let file = dir.path().join("leaks.tansa");
    let out = record(&file, LEAK_CAUSE, &[exe.to_str().unwrap(), "400000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("tansa leaks"), "{}", stderr(&out));
    let o = run_tansa(&["leaks", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("leaking: leakcause-O0!funcA"), "{text}");
    assert!(
        text.contains("cause: the leaking path leaves the freeing ones in leakcause-O0!funcB"),
        "{text}"
    );
    assert!(
        text.contains("error_condition_1"),
        "the branch's source line: {text}"
    );
    // --site selects one site; a number out of range is misuse.
    let o = run_tansa(&[
        "leaks",
        file.to_str().unwrap(),
        "--site",
        "1",
        "--format",
        "json",
    ]);
    let one: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(one["sites"].as_array().unwrap().len(), 1);
    // A site that is not leaking, chosen with --site, is shown with its place and stack.
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json", "--all"]);
    let all: Value = serde_json::from_slice(&o.stdout).unwrap();
    let other = all["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["judgement"] != "leaking")
        .expect("a site that is not leaking");
    let place = other["site"]["function"].as_str().unwrap();
    assert!(place.contains('!'), "{other}");
    let index = other["index"].to_string();
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--site", &index]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!(": {place}")), "{place} in {text}");
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--site", "99"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// A forked child that leaked for the first part of the recording, then exited, is judged
/// over its own life: its site is leaking, although its count of blocks held stayed the
/// same for the rest of the recording, while the parent went on.
#[test]
fn a_child_that_leaked_early_in_the_recording_is_judged_over_its_own_life() {
    let dir = tempfile::tempdir().unwrap();
    let exe = program("childleak", "childleak.c", &["-g", "-O1"]);
    let file = dir.path().join("child.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap(), "400000", "2000000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json", "--all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = site(&r, "!child_leak");
    assert_eq!(s["allocations"], 400000, "{s:#}");
    assert_eq!(s["leaked_blocks"], 100000, "{s:#}");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    // The checkpoints cover the child's life (at the resolution of the recording's
    // moments, so two may fall in one): the blocks held never fall, and grow overall.
    let held: Vec<u64> = s["outstanding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(held.windows(2).all(|w| w[0] <= w[1]), "{held:?}");
    assert!(held[0] < held[held.len() - 1], "{held:?}");
    let parent = site(&r, "!parent_work");
    assert_eq!(parent["judgement"], "freed", "{parent:#}");
}

#[test]
fn plain_recordings_get_the_judgement_without_causes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O2");
    let file = dir.path().join("plain.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap(), "100000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    assert_eq!(r["leak_cause"], false);
    let s = site(&r, "!funcA");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert_eq!(s["allocations"], 100000);
    assert_eq!(
        s["frees"].as_u64().unwrap() + s["leaked_blocks"].as_u64().unwrap(),
        100000
    );
    assert!(s["cause_functions"].as_array().unwrap().is_empty());
}

/// A script that runs a leaking program three times: each run is its own process image
/// with its own sites (JSON, with the program's path), and the text view shows the leaking
/// site once, with one line for its two repeats, instead of three times.
#[test]
fn a_site_repeated_by_a_script_is_shown_once_with_its_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O2");
    let file = dir.path().join("script.tansa");
    let run = format!("{0} 20000; {0} 20000; {0} 20000", exe.display());
    let out = record(&file, &[], &["/bin/sh", "-c", &run]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    let func_a: Vec<&Value> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"].as_str().unwrap().ends_with("!funcA"))
        .collect();
    assert_eq!(func_a.len(), 3, "one site per run: {func_a:#?}");
    let mut pids: Vec<u64> = func_a.iter().map(|s| s["pid"].as_u64().unwrap()).collect();
    pids.dedup();
    assert_eq!(pids.len(), 3, "{pids:?}");
    for s in &func_a {
        assert_eq!(s["exe"].as_str(), exe.to_str(), "{s:#}");
        assert_eq!(s["judgement"], "leaking", "{s:#}");
    }
    let blocks: u64 = func_a[1..]
        .iter()
        .map(|s| s["leaked_blocks"].as_u64().unwrap())
        .sum();
    let o = run_tansa(&["leaks", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let headers: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('#') && l.contains("!funcA"))
        .collect();
    assert_eq!(headers.len(), 1, "{text}");
    let entries = text.lines().filter(|l| l.starts_with('#')).count();
    assert!(
        text.lines().next().unwrap().contains(&format!(
            "; {entries} shown below, the others repeating them"
        )),
        "{text}"
    );
    assert!(
        headers[0].ends_with(&format!("(process {} leakcause-O2)", func_a[0]["pid"])),
        "{text}"
    );
    let repeats = format!(
        "   the same site is leaking in 2 more process image(s) of leakcause-O2 (#{}, #{}): \
         {blocks} block(s),",
        func_a[1]["index"], func_a[2]["index"]
    );
    assert!(text.contains(&repeats), "{repeats} in {text}");
}

/// Two calls of one function on one source line are two call paths that look the same in
/// the text (same functions, files and lines): the second is folded under the first as a
/// repeat in this process, not called another process image. Before, it was said to be
/// "in 1 more process image(s)" of the same, single process (OpenMP's thread start, which
/// has no line numbers, does this too).
#[test]
fn call_paths_that_look_the_same_are_folded_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let exe = program("samelinecalls", "samelinecalls.c", &["-g", "-O0"]);
    let file = dir.path().join("sameline.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    let make: Vec<&Value> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"] == "samelinecalls!make")
        .collect();
    assert_eq!(make.len(), 2, "one site per call: {make:#?}");
    assert_eq!(make[0]["stack"], make[1]["stack"]);
    assert_eq!(make[0]["pid"], make[1]["pid"]);
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let headers = text
        .lines()
        .filter(|l| l.starts_with('#') && l.contains("samelinecalls!make"))
        .count();
    assert_eq!(headers, 1, "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("the others repeating them through call paths that look the same"),
        "{text}"
    );
    let repeat = format!(
        "   the same site ({}) repeats through 1 more call path(s) of this process that look \
         the same (#{}): 2000 block(s), 48000 byte(s) still allocated there",
        make[0]["judgement"].as_str().unwrap(),
        make[1]["index"]
    );
    assert!(text.contains(&repeat), "{repeat} in {text}");
    assert!(!text.contains("process image"), "{text}");
}

/// A leak-cause recording too short for the recorder to judge its sites while it ran: the
/// leaking sites say why they have no cause, instead of nothing. Before, a 26 ms run of a
/// C++ program showed its leaking sites under --leak-cause (default 50 ms scans) with no
/// trace, no cause and no word of why.
#[test]
fn a_run_too_short_to_be_judged_says_why_nothing_was_traced() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O2");
    let file = dir.path().join("short.tansa");
    // Judged every 10 s: however loaded the machine, the run ends before the first scan.
    let out = record(
        &file,
        &["--leak-cause", "--scan-interval", "10s"],
        &[exe.to_str().unwrap(), "20000"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    assert_eq!(r["scan_interval_ms"], 10_000);
    let a = site(&r, "!funcA");
    assert_eq!(a["judgement"], "leaking", "{a:#}");
    assert!(
        a["tracing"].is_null(),
        "traced in a 20000-request run: {a:#}"
    );
    let o = run_tansa(&["leaks", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "   not traced: the recorder did not judge it leaking while the program ran (it \
             judges every 10000 ms the events read so far, and a site leaks once its blocks \
             outstanding grew at 3 scans in a row, so a run shorter than 40000 ms is never \
             traced, nor one whose events were read only at its end"
        ),
        "{text}"
    );
}

/// A site judged leaking only after its last allocation, with the program still running:
/// the recorder asked for traces and none could come. Such a site says so; before, it was
/// dropped from the tracing and the text claimed the recorder never judged it leaking (a
/// 60 ms C++ run whose 2.8 MiB of events the recorder read as it ended). `lastleak` leaks
/// its second block after half a second and never allocates there again, so no timing can
/// judge the site before that block (one outstanding block is not a leak), and it sleeps
/// for a second after it, dozens of 10 ms scans.
#[test]
fn a_site_judged_after_its_last_allocation_says_none_was_left_to_trace() {
    let dir = tempfile::tempdir().unwrap();
    let exe = program("lastleak", "lastleak.c", &["-g", "-O0"]);
    let file = dir.path().join("last.tansa");
    let out = record(&file, LEAK_CAUSE, &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    let s = site(&r, "!make");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert_eq!(s["allocations"], 3, "{s:#}");
    assert_eq!(s["tracing"], "ended", "{s:#}");
    assert_eq!(s["traces"]["freed"], 0, "{s:#}");
    assert_eq!(s["traces"]["not_freed"], 0, "{s:#}");
    let o = run_tansa(&["leaks", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "   not traced: judged leaking only as the program ended, and no later allocation \
             here was traced"
        ),
        "{text}"
    );
    assert!(!text.contains("did not judge it leaking"), "{text}");
}

/// Twenty sites judged leaking at once, after their last allocations: sixteen take the
/// process's trace slots (and, with nothing left to trace, end as `ended`); the other four
/// find none free, and say so. They were dropped, and the text claimed the recorder never
/// judged them leaking.
#[test]
fn sites_beyond_the_trace_slots_say_they_found_none_free() {
    let dir = tempfile::tempdir().unwrap();
    let exe = program("manyleaks", "manyleaks.c", &["-g", "-O0"]);
    let file = dir.path().join("many.tansa");
    let out = record(&file, LEAK_CAUSE, &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = leaks_json(&file);
    let sites: Vec<&Value> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["site"]["function"]
                .as_str()
                .is_some_and(|f| f.starts_with("manyleaks!make"))
        })
        .collect();
    assert_eq!(sites.len(), 20, "{r:#}");
    let mut ended = 0;
    let mut no_slot = 0;
    for s in &sites {
        assert_eq!(s["judgement"], "leaking", "{s:#}");
        assert_eq!(s["traces"]["freed"], 0, "{s:#}");
        match s["tracing"].as_str() {
            Some("ended") => ended += 1,
            Some(t) if t.contains("trace slots of its process was taken") => no_slot += 1,
            _ => panic!("{s:#}"),
        }
    }
    assert_eq!((ended, no_slot), (16, 4));
    let o = run_tansa(&["leaks", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.matches("   not traced: every one of the 16 trace slots of its process was taken")
            .count(),
        4,
        "{text}"
    );
    assert!(!text.contains("did not judge it leaking"), "{text}");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    // Garbage.
    let garbage = dir.path().join("garbage.tansa");
    std::fs::write(&garbage, b"not a recording at all").unwrap();
    let o = run_tansa(&["leaks", garbage.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("not a tansa recording"), "{e}");
    // A CPU recording.
    let cpu = dir.path().join("cpu.tansa");
    let exe = leakcause("O2");
    let out = run_tansa(&[
        "sample",
        "--source",
        "agent",
        "-o",
        cpu.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "20000",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let o = run_tansa(&["leaks", cpu.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("`tansa leaks` reads heap recordings"), "{e}");
    // A truncated heap recording: what precedes the damage, a warning, status 3.
    let heap = dir.path().join("heap.tansa");
    let out = record(&heap, &[], &[exe.to_str().unwrap(), "20000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&heap).unwrap();
    let cut = dir.path().join("cut.tansa");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let o = run_tansa(&["leaks", cut.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("tansa: warning: "), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
    // `--trace-steps` out of its range, or without leak-cause mode: usage errors that name
    // the option, and nothing is run.
    let out_file = dir.path().join("never.tansa");
    for options in [
        &["--leak-cause", "--trace-steps", "10"][..],
        &["--trace-steps", "5000"][..],
    ] {
        let o = record(&out_file, options, &[exe.to_str().unwrap(), "20000"]);
        assert_eq!(o.status.code(), Some(2), "{options:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--trace-steps"), "{}", stderr(&o));
        assert!(o.stdout.is_empty(), "the program did not run");
        assert!(!out_file.exists());
    }
}

/// A short recording read with a later, longer one (two runs of a job made apart): the
/// short one's leaking site is judged over its own run, as when it is read alone. Judged
/// over the span of both, its whole run fell in one or two of the counting moments, its
/// checkpoints were all equal, and it came out `not-growing`.
#[test]
fn a_short_recording_read_with_a_longer_later_one_is_judged_over_its_own_run() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O0");
    let short = dir.path().join("short.tansa");
    let out = record(&short, &[], &[exe.to_str().unwrap(), "20000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let long = dir.path().join("long.tansa");
    let sleeper = program("allocer", "allocer.c", &["-O1"]);
    let out = record(&long, &[], &[sleeper.to_str().unwrap(), "1500"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let funca = |files: &[&Path]| -> Value {
        let mut args = vec!["leaks"];
        args.extend(files.iter().map(|f| f.to_str().unwrap()));
        args.extend(["--format", "json", "--all"]);
        let o = run_tansa(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        let found: Vec<Value> = r["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["site"]["function"] == "leakcause-O0!funcA")
            .cloned()
            .collect();
        assert_eq!(found.len(), 1, "{r:#}");
        found[0].clone()
    };
    let alone = funca(&[&short]);
    assert_eq!(alone["judgement"], "leaking", "{alone:#}");
    let with_long = funca(&[&short, &long]);
    assert_eq!(with_long["judgement"], "leaking", "{with_long:#}");
    assert_eq!(
        with_long["outstanding"], alone["outstanding"],
        "{with_long:#}"
    );
}

/// A pause between the leaking work and the end (here a sleep before the program's last
/// allocation; on a busy machine, the process descheduled) is not growth that stopped: the
/// moments of the judgement are spread over the process's allocations and releases, not
/// its time. Spread over time, the site's 20,000 requests fell in the first of the eight
/// checkpoints and it came out `not-growing`.
#[test]
fn a_pause_before_the_end_does_not_hide_a_leak() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O0");
    let file = dir.path().join("pause.tansa");
    let out = record(
        &file,
        &[],
        &[exe.to_str().unwrap(), "20000", "1", "0", "400"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let o = run_tansa(&["leaks", file.to_str().unwrap(), "--format", "json", "--all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = site(&r, "!funcA");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    let outstanding: Vec<u64> = s["outstanding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    // Evenly spread over the work: each eighth of the requests leaks about an eighth of
    // the blocks (20 % of 70 % of 2,500 requests, 350, give or take chance).
    assert_eq!(outstanding.len(), 8);
    for w in outstanding.windows(2) {
        assert!(
            (200..=500).contains(&(w[1] as i64 - w[0] as i64)),
            "{outstanding:?}"
        );
    }
}

/// `--traces N` traces at most N allocations of a site: a trace in flight when more are
/// granted counts against the limit (it traced N + 1).
#[test]
fn traces_stop_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leakcause("O0");
    for limit in [1u64, 3] {
        let file = dir.path().join(format!("limit{limit}.tansa"));
        let mut options = LEAK_CAUSE.to_vec();
        let limit_text = limit.to_string();
        options.extend(["--traces", limit_text.as_str()]);
        let out = record(&file, &options, &[exe.to_str().unwrap(), "400000"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let r = leaks_json(&file);
        let s = site(&r, "!funcA");
        let traced =
            s["traces"]["freed"].as_u64().unwrap() + s["traces"]["not_freed"].as_u64().unwrap();
        assert!(
            (1..=limit).contains(&traced),
            "--traces {limit}: {traced} traced: {s:#}"
        );
    }
}

/// The site of the test program `src` allocating on the line holding `marker`.
fn site_at<'a>(r: &'a Value, src: &str, marker: &str) -> &'a Value {
    let line = line_of(src, marker);
    r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["site"]["line"] == line && s["site"]["file"].as_str().unwrap().ends_with(src))
        .unwrap_or_else(|| panic!("no site at {src}:{line}: {r:#}"))
}

/// Asserts that `s` is leaking, with `cause` (`module!function`) its one cause function
/// and one cause branch there, on the line of `src` holding `marker` (or the next: line
/// tables may give a conditional jump the line of the statement it guards).
fn assert_cause(s: &Value, src: &str, cause: &str, marker: &str) {
    let evidence = format!(
        "tracing {}, traces {}, paths {:#}",
        s["tracing"], s["traces"], s["paths"]
    );
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert!(
        s["traces"]["not_freed"].as_u64().unwrap() >= 1,
        "{evidence}"
    );
    assert_eq!(cause_functions(s), [cause], "{s:#}");
    let branches = s["cause_branches"].as_array().unwrap();
    assert_eq!(branches.len(), 1, "{s:#}");
    assert_eq!(branches[0]["function"], cause, "{s:#}");
    let line = branches[0]["line"].as_u64().unwrap();
    let want = line_of(src, marker);
    assert!(
        line == want || line == want + 1,
        "line {want}: {:#}, {evidence}",
        branches[0]
    );
}

/// A leaking branch that calls a helper (`helperleak.c`): `work`'s error path calls
/// `report_error`, which memsets, as `work` did before the branch. The paths part in
/// `work`, at that branch. Before, the leaking path's steps were matched with the freeing
/// paths' by symbol alone: the helper's `memset` matched the one `work` ran, and the cause
/// was `report_error`, with no branch. Likewise `handle`'s `y` leaks at its condition, and
/// both paths then call `parse` (which memsets): `parse` was listed as a second cause.
#[test]
fn a_helper_called_on_the_leaking_branch_is_not_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let src = "helperleak.c";
    let exe = program("helperleak", src, &["-g", "-O0"]);
    let r = record_and_report(dir.path(), &exe, &["400000"]);
    let work = site_at(&r, src, "work's allocation");
    assert_cause(
        work,
        src,
        "helperleak!work",
        "work's error condition: the leak",
    );
    let y = site_at(&r, src, "handle's y");
    assert_cause(
        y,
        src,
        "helperleak!handle",
        "handle's y condition: the leak",
    );
}

/// An error check that throws before it calls anything (`throwleak.cpp`): `check`'s
/// branch decides whether `process`'s block is freed. Before, only function entries and
/// exits were matched: the last one both paths ran was the entry of `check`, so the cause
/// was its caller `process`, where no branch parts the paths.
#[test]
fn a_leak_by_a_throwing_check_is_traced_to_its_branch() {
    let dir = tempfile::tempdir().unwrap();
    let src = "throwleak.cpp";
    let exe = program("throwleak", src, &["-g", "-O0"]);
    let r = record_and_report(dir.path(), &exe, &["200000"]);
    let s = site_at(&r, src, "process's allocation");
    assert_cause(
        s,
        src,
        "throwleak!check(int)",
        "check's error condition: the leak",
    );
}

/// A leak decided on another thread (`crossthread.c`): the producer allocates, the
/// consumer frees each message unless its condition holds. The traced thread is the
/// allocating one, which never frees: a traced block was freed while it happened to run
/// somewhere, so its paths say nothing of where freeing and leaking part. The site says
/// so, and names no cause. Before, the freed traces were taken for freeing paths ending
/// wherever the producer was when the consumer freed, and the cause came out as the
/// producer's loop (`producer`, at its queue-full test), which has no bearing on the leak.
#[test]
fn blocks_freed_by_another_thread_give_no_cause_but_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let src = "crossthread.c";
    let exe = program("crossthread", src, &["-g", "-O0", "-pthread"]);
    let r = record_and_report(dir.path(), &exe, &["1000"]);
    let s = site_at(&r, src, "make_msg's allocation");
    assert_eq!(s["judgement"], "leaking", "{s:#}");
    assert_eq!(s["allocations"], 1000);
    assert_eq!(s["leaked_blocks"], 250, "{s:#}");
    assert!(
        s["traces"]["freed_elsewhere"].as_u64().unwrap() >= 1,
        "{s:#}"
    );
    assert!(s["traces"]["not_freed"].as_u64().unwrap() >= 1, "{s:#}");
    assert_eq!(s["traces"]["freed"], 0, "the producer frees nothing: {s:#}");
    assert!(
        s["paths"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["end"] == "E"),
        "{s:#}"
    );
    assert_eq!(s["cause_not_found"], "freed-by-another-thread", "{s:#}");
    assert!(cause_functions(s).is_empty(), "{s:#}");
    assert!(s["cause_branches"].as_array().unwrap().is_empty(), "{s:#}");
    // Other sites have no such reason.
    let helper = site_at(&r, src, "make_msg's allocation")["index"].clone();
    for other in r["sites"].as_array().unwrap() {
        if other["index"] != helper {
            assert!(other["cause_not_found"].is_null(), "{other:#}");
        }
    }
    let o = run_tansa(&["leaks", dir.path().join("leaks.tansa").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("freed by another thread"), "{text}");
    assert!(text.contains("no cause found"), "{text}");
    assert!(!text.contains("cause: the leaking path"), "{text}");
}
