//! A target that dies, forks and execs, C++ allocations, and bad input.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use serde_json::Value;

fn o0() -> Fig3 {
    fig3("O0", &["-O0", "-fno-omit-frame-pointer"])
}

/// Phases A to E of fig3.c, recorded before the program dies: every one of their events is
/// in the report.
fn check_until_death(r: &Value, signal: &str) {
    assert_eq!(r["process"]["exit"]["kind"], "signaled", "{}", r["process"]);
    assert_eq!(r["process"]["exit"]["signal_name"], signal);
    let liba = unit(r, "liba.so");
    assert_eq!(bytes(liba), (1200, 1200, 1200, 0));
    assert_eq!(calls(liba), (10, 1, 0, 0, 0));
    let libb = unit(r, "libb.so");
    assert_eq!(bytes(libb), (300, 0, 300, 0));
    let exe = unit(r, "fig3");
    assert_eq!(bytes(exe), (1700, 384, 1380, 0));
    assert_eq!(calls(exe), (1, 0, 3, 5, 5));
    assert!(!has_unit(r, "libplug.so"), "phase F never ran");
}

#[test]
fn sigkill_midway_loses_nothing_recorded() {
    let f = o0();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k.tansa");
    let out = record(
        &file,
        &[],
        &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap(), "kill"],
    );
    assert_eq!(
        out.status.code(),
        Some(128 + 9),
        "tansa record exits like the target: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("killed by SIGKILL"),
        "{}",
        stderr(&out)
    );
    check_until_death(&report_json(&file, &[]), "SIGKILL");
}

#[test]
fn sigsegv_midway_loses_nothing_recorded() {
    let f = o0();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.tansa");
    let out = record(
        &file,
        &[],
        &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap(), "segv"],
    );
    assert_eq!(out.status.code(), Some(128 + 11), "{}", stderr(&out));
    check_until_death(&report_json(&file, &[]), "SIGSEGV");
}

#[test]
fn online_table_is_printed_when_a_signal_kills_the_program() {
    let f = o0();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("online.json");
    let out = record(
        &json,
        &["--online", "--format", "json"],
        &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap(), "kill"],
    );
    assert_eq!(out.status.code(), Some(137));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    check_until_death(&r, "SIGKILL");
    // Without -o the table goes to standard error.
    let out = run_tansa(&[
        "record",
        "--online",
        "--",
        f.exe.to_str().unwrap(),
        f.plugin.to_str().unwrap(),
        "kill",
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("liba.so") && err.contains("killed by SIGKILL"),
        "{err}"
    );
}

#[test]
fn fork_and_exec_children_are_recorded() {
    let exe = program("forker", "forker.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fork.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(
        procs.len(),
        3,
        "parent, forked child, exec'd image: {procs:?}"
    );
    let parent = procs[0]["pid"].as_u64().unwrap();
    let child = procs
        .iter()
        .find(|p| p["ppid"].as_u64() == Some(parent))
        .expect("forked child");
    let child_pid = child["pid"].as_u64().unwrap();
    let images: Vec<&Value> = procs
        .iter()
        .filter(|p| p["pid"].as_u64() == Some(child_pid))
        .collect();
    assert_eq!(
        images.len(),
        2,
        "the child pid has two images (fork, then exec)"
    );
    assert_eq!(images[0]["exit"]["kind"], "exec");
    assert_eq!(
        images[1]["command"],
        serde_json::json!([exe.to_str().unwrap(), "child"])
    );
    assert_eq!(r["process"]["exit"]["code"], 0);

    // Merged: everything the three images allocated.
    let main = unit(&r, "forker!main");
    assert_eq!(main["allocated_bytes"], 1111 + 4444 + 2222 + 3333);
    // The child's release of a block inherited from its parent is counted but not charged.
    assert_eq!(r["inherited_frees"], 1);
    assert_nothing_improper(&r);

    // Only the child: its two images.
    let rc = report_json(
        &file,
        &["--by", "function", "--pid", &child_pid.to_string()],
    );
    assert_eq!(unit(&rc, "forker!main")["allocated_bytes"], 2222 + 3333);
    assert_eq!(unit(&rc, "forker!main")["net_bytes"], 2222 + 3333);
    // Its table names both images, and the last one's end (it named the first one's).
    let table = run_tansa(&[
        "report",
        file.to_str().unwrap(),
        "--pid",
        &child_pid.to_string(),
    ]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains(&format!(
            "process {child_pid} (images `{}` then `{} child`): exited with code 7",
            exe.display(),
            exe.display()
        )),
        "{text}"
    );
    let rp = report_json(&file, &["--by", "function", "--pid", &parent.to_string()]);
    assert_eq!(bytes(unit(&rp, "forker!main")), (5555, 5555, 5555, 0));
}

#[test]
fn cpp_new_delete_and_containers() {
    let exe = program("containers", "containers.cpp", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpp.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    // operator new and delete are allocator entry points, never units: the widgets belong
    // to the functions that new and delete them.
    let w = unit(&r, "containers!make_widgets()");
    assert_eq!(bytes(w), (4800, 2400, 4800, 0));
    assert_eq!(calls(w), (100, 0, 0, 50, 0));
    for u in r["units"].as_array().unwrap() {
        let name = u["unit"].as_str().unwrap();
        assert!(
            !name.contains("operator new") && !name.contains("operator delete"),
            "{name}"
        );
    }
    // The strings are built by libstdc++'s own code: by library, it is charged.
    let r = report_json(&file, &[]);
    let stdcpp = unit(&r, "libstdc++.so.6");
    assert!(
        stdcpp["calls"]["malloc"].as_u64().unwrap() >= 50,
        "{stdcpp}"
    );
    // The vector of 1000 ints grew by doubling in the executable's template code:
    // 4 + 8 + ... + 4096 bytes, all released.
    let exe_unit = unit(&r, "containers");
    assert!(exe_unit["allocated_bytes"].as_i64().unwrap() >= 4800 + 8188);
}

/// Rust's allocator shims (`__rustc::__rdl_alloc` since Rust 1.88: the `__rdl_` prefix
/// alone no longer matched) and `Box`'s allocation are allocator entry points, as C++'s
/// `operator new` is: a box belongs to the function that makes it. Built with line tables
/// only, the functions inlined from the standard library are named without their path
/// (`realloc`, `alloc`), and their source file tells them. Before, by function, recording
/// `tansa report` itself put 705 of its 709 MiB on `tansa!__rustc::__rdl_realloc` and
/// `tansa!__rustc::__rdl_alloc`.
#[test]
fn rust_allocator_shims_and_box_are_no_units() {
    let plumbing = [
        "alloc",
        "realloc",
        "alloc_zeroed",
        "box_new_uninit",
        "grow",
        "grow_impl",
        "grow_impl_runtime",
        "alloc_impl",
        "alloc_impl_runtime",
    ];
    for (name, debug) in [
        ("rustalloc-g", "-g"),
        ("rustalloc-lines", "-Cdebuginfo=line-tables-only"),
    ] {
        let exe = program(name, "rustalloc.rs", &["-Copt-level=2", debug]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rust.tansa");
        let out = record(&file, &[], &[exe.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 1000");
        let r = report_json(&file, &["--by", "function"]);
        // Named with its path under line tables only too (from its symbol).
        let boxes = unit(&r, &format!("{name}!rustalloc::boxes"));
        assert_eq!(calls(boxes).0, 200, "{debug}: {boxes}");
        assert_eq!(
            boxes["allocated_bytes"].as_i64(),
            Some(20_000),
            "{debug}: {boxes}"
        );
        for u in r["units"].as_array().unwrap() {
            let unit = u["unit"].as_str().unwrap();
            let function = unit.split_once('!').map_or(unit, |(_, f)| f);
            let path = function.strip_prefix('<').unwrap_or(function);
            assert!(
                ![
                    "__rdl",
                    "__rust_",
                    "__rustc::",
                    "alloc::alloc::",
                    "alloc::boxed::"
                ]
                .iter()
                .any(|p| path.starts_with(p))
                    && !plumbing.contains(&function),
                "{debug}: {unit} is allocator plumbing"
            );
        }
    }
}

/// `std::thread` starts a thread in libstdc++, which calls the program's function: what
/// that thread allocates is the program's, not libstdc++'s. Before, by library, every
/// allocation of every `std::thread` was charged to libstdc++ (its trampoline was taken for
/// the first library the thread called).
#[test]
fn std_thread_allocations_belong_to_the_program() {
    let exe = program("stdthreads", "stdthreads.cpp", &["-g", "-O1", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("threads.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let work = unit(&r, "stdthreads!work(int)");
    assert_eq!(calls(work).0, 1000, "{work}");
    assert_eq!(work["allocated_bytes"].as_i64(), Some(100_000), "{work}");
    let r = report_json(&file, &[]);
    let program = unit(&r, "stdthreads");
    assert!(calls(program).0 >= 1000, "{program}");
    for u in r["units"].as_array().unwrap() {
        if u["unit"].as_str().unwrap().starts_with("libstdc++") {
            assert!(
                calls(u).0 < 100,
                "libstdc++ was charged the threads' blocks: {u}"
            );
        }
    }
}

#[test]
fn a_command_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let out = record(
        &dir.path().join("x.tansa"),
        &[],
        &["/nonexistent/program-xyz"],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("cannot run /nonexistent/program-xyz") && err.contains("No such file"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // Nothing ran: no recording, partial or temporary, is left.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn unknown_unit_is_rejected_with_the_choices() {
    let out = run_tansa(&["report", "whatever.tansa", "--by", "planet"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("invalid value 'planet'") && err.contains("library"),
        "{err}"
    );
}

#[test]
fn garbage_empty_and_missing_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.tansa");
    std::fs::write(&garbage, b"this is not a recording at all, just text\n").unwrap();
    let empty = dir.path().join("empty.tansa");
    std::fs::write(&empty, b"").unwrap();
    for (path, expect) in [
        (garbage.clone(), "not a tansa recording"),
        (empty.clone(), "not a tansa recording: the file is empty"),
        (dir.path().join("missing.tansa"), "cannot open"),
    ] {
        let out = run_tansa(&["report", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", path.display());
        let err = stderr(&out);
        assert!(err.contains(expect), "{}: {err}", path.display());
        assert!(!err.contains("panicked"), "{err}");
    }
    // A FIFO is refused at once by every command that reads recordings; opening it to read
    // used to wait for a writer for ever.
    let fifo = dir.path().join("fifo.tansa");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let f = fifo.to_str().unwrap();
    let out_file = dir.path().join("out");
    let o = out_file.to_str().unwrap();
    for args in [
        &["report", f][..],
        &["dump", f],
        &["annotate", f, "main"],
        &["leaks", f],
        &["diff", f, f],
        &["export", f, "--format", "pprof", "-o", o],
        &["flamegraph", f, "-o", o],
        &["html", f, "-o", o],
    ] {
        let mut cmd = Command::new(tansa());
        cmd.args(args);
        let out = output_within(cmd, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&out).contains("cannot open it: it is a FIFO, not a recording file"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn truncated_recordings_report_what_precedes_the_damage() {
    let f = o0();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("full.tansa");
    let out = record(
        &file,
        &[],
        &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap()],
    );
    assert!(out.status.success());
    let bytes_full = std::fs::read(&file).unwrap();
    // Every cut point: never a panic; a damaged file exits 3 with a warning; the events
    // that survived are reported.
    let step = (bytes_full.len() / 40).max(1);
    for cut in (0..bytes_full.len()).step_by(step) {
        let t = dir.path().join("cut.tansa");
        std::fs::write(&t, &bytes_full[..cut]).unwrap();
        let out = run_tansa(&["report", t.to_str().unwrap(), "--format", "json"]);
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "cut {cut}: {err}");
        if cut < 16 {
            assert_eq!(out.status.code(), Some(1), "cut {cut}: {err}");
            continue;
        }
        assert_eq!(out.status.code(), Some(3), "cut {cut}: {err}");
        assert!(err.contains("warning"), "cut {cut}: {err}");
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["warnings"].as_array().unwrap().iter().any(|w| {
            let w = w.as_str().unwrap();
            w.contains("ends in the middle of a frame") || w.contains("without its end marker")
        }));
    }
    // A flipped byte in the middle of an event chunk is caught by its checksum.
    let mut bad = bytes_full.clone();
    let mid = bad.len() / 3;
    bad[mid] ^= 0x5a;
    let t = dir.path().join("flipped.tansa");
    std::fs::write(&t, &bad).unwrap();
    let out = run_tansa(&["report", t.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("damaged data (its checksum does not match) at byte"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn online_mode_refuses_and_reports_improper_use() {
    let exe = program("improper", "improper.c", &["-g", "-O0"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("improper.json");
    let out = record(
        &json,
        &["--online", "--format", "json", "--by", "function"],
        &[exe.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "the program went on: {}",
        stderr(&out)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "survived");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let improper = r["improper"].as_array().unwrap();
    assert_eq!(improper.len(), 2, "{improper:?}");
    for (op, func) in [("free", "bad_free"), ("realloc", "bad_realloc")] {
        let i = improper
            .iter()
            .find(|i| i["op"] == op)
            .unwrap_or_else(|| panic!("no improper {op}"));
        assert_eq!(i["count"], 1);
        assert_eq!(i["refused"], true);
        assert_eq!(
            i["stack"][0]["function"], func,
            "the stack of the improper call: {}",
            i["stack"]
        );
        assert_eq!(i["stack"][1]["function"], "main");
    }
    // The valid block was still released normally.
    let main = unit(&r, "improper!main");
    assert_eq!(bytes(main), (64, 0, 64, 0));
    assert_eq!(calls(main), (1, 0, 0, 1, 0));
    // The table names them too.
    let out = run_tansa(&["record", "--online", "--", exe.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(
        err.contains("improper use") && err.contains("bad_free"),
        "{err}"
    );
}

#[test]
fn default_recording_name_names_the_command_and_its_pid() {
    let f = o0();
    let dir = tempfile::tempdir().unwrap();
    ensure_agent();
    let out = std::process::Command::new(tansa())
        .current_dir(dir.path())
        .args([
            "record",
            "--",
            f.exe.to_str().unwrap(),
            f.plugin.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let name = &names[0];
    let pid: u32 = name
        .strip_prefix("tansa-fig3-")
        .and_then(|s| s.strip_suffix(".tansa"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected name {name}"));
    let r = report_json(&dir.path().join(name), &[]);
    assert_eq!(r["process"]["pid"], pid);
    assert!(
        stderr(&out).contains(name.as_str()),
        "the name is announced: {}",
        stderr(&out)
    );
}

/// A program whose name is not all letters (`g++`) keeps it in what `tansa record` says;
/// only the default file name replaces what a file name should not hold. Before, the
/// summary said "tansa: g__ exited with code 0".
#[test]
fn the_summary_names_the_program_as_it_is_called() {
    let f = o0();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("fig3+x");
    std::fs::copy(&f.exe, &exe).unwrap();
    ensure_agent();
    let out = std::process::Command::new(tansa())
        .current_dir(dir.path())
        .args(["record", "--"])
        .arg(&exe)
        .arg(&f.plugin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("tansa: fig3+x exited with code 0; recorded 1 process image(s)"),
        "{}",
        stderr(&out)
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tansa"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("tansa-fig3_x-"), "{names:?}");
}

/// `--by program`: the process images of one program as one unit (a script running a
/// program three times), with how many there were; the same offline and online.
#[test]
fn a_scripts_processes_add_up_per_program() {
    let exe = program("allocer", "allocer.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script.tansa");
    let script = format!("for i in 1 2 3; do {} 0 3; done", exe.display());
    let out = record(&file, &[], &["/bin/sh", "-c", &script]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "program"]);
    assert_eq!(r["by"], "program");
    let u = unit(&r, "allocer");
    assert_eq!(u["processes"], 3, "{u}");
    assert_eq!(u["exe"].as_str(), exe.to_str(), "{u}");
    assert_eq!(calls(u), (9, 0, 0, 9, 0), "{u}");
    assert_eq!(bytes(u), (9999, 0, 1111, 0), "{u}");
    // Every event is in one program's unit.
    let sum: i64 = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["allocated_bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(sum, r["totals"]["allocated_bytes"].as_i64().unwrap());
    let table = run_tansa(&["report", file.to_str().unwrap(), "--by", "program"]);
    assert!(table.status.success(), "{}", stderr(&table));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("allocer (3 processes)"), "{text}");
    let json = dir.path().join("online.json");
    let out = run_tansa(&[
        "record",
        "--online",
        "--by",
        "program",
        "--format",
        "json",
        "-o",
        json.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let online: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let u = unit(&online, "allocer");
    assert_eq!(u["processes"], 3, "{u}");
    assert_eq!(calls(u), (9, 0, 0, 9, 0), "{u}");
}

/// Options are parsed as options: an unknown one before the command is a usage error and
/// runs nothing (it was taken as the command); what follows the command goes to it.
#[test]
fn an_unknown_option_is_not_taken_for_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    for sub in ["record", "sample"] {
        let o = run_tansa(&[sub, "--bogus", "--", "touch", marker.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{sub}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("unexpected argument '--bogus'"),
            "{}",
            stderr(&o)
        );
        assert!(!marker.exists(), "{sub} ran the command");
    }
    // Without `--`, the command's own options stay its own.
    let file = dir.path().join("echo.tansa");
    let o = run_tansa(&[
        "record",
        "-o",
        file.to_str().unwrap(),
        "/bin/echo",
        "--x",
        "-y",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "--x -y");
}

/// A recording of many process images summarizes them above the table (counts by command,
/// the abnormal ends); `--processes` lists each one, children under their parent.
#[test]
fn many_process_images_are_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tree.tansa");
    let script = "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sh -c 'kill -9 $$'; done; exit 0";
    let o = record(&file, &[], &["sh", "-c", script]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("13 process images recorded: 13 x "), "{text}");
    assert!(text.contains("  12 ended abnormally:"), "{text}");
    // Ten of them listed (their parent shell collected their statuses, so the recorder
    // knows them as killed or unknown).
    let listed = text.lines().filter(|l| l.starts_with("    pid ")).count();
    assert_eq!(listed, 10, "ten listed: {text}");
    assert!(!text.contains("(parent "), "no per-image list: {text}");
    let o = run_tansa(&["report", file.to_str().unwrap(), "--processes"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let children = text
        .lines()
        .filter(|l| l.starts_with("    pid ") && l.contains("`sh -c kill -9 $$`"))
        .count();
    assert_eq!(children, 12, "each child under the shell: {text}");
}

/// When the command exits and a process it started still runs under the agent, the
/// recording goes on and says so once (the collector's `StillRecording` event, printed by
/// the CLI), then ends when that process ends, with its events recorded.
#[test]
fn processes_left_behind_are_waited_for_and_named() {
    use std::io::BufRead;
    ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("left.tansa");
    let go = dir.path().join("go");
    // The background shell waits for `go`, which the test creates once the message came.
    let script = format!(
        "(while [ ! -e {go} ]; do sleep 0.05; done) & exit 0",
        go = go.display()
    );
    let mut child = std::process::Command::new(tansa())
        .args([
            "record",
            "-o",
            file.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Whatever happens, the background shell ends within a minute.
    let watchdog = {
        let go = go.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(60));
            let _ = std::fs::write(go, "");
        })
    };
    let mut seen = Vec::new();
    let mut told = false;
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        // The background shell, and perhaps one of its `sleep`s.
        if line.starts_with("tansa: the command exited; still recording ")
            && line.contains(" process(es) it started: ")
        {
            told = true;
            std::fs::write(&go, "").unwrap();
        }
        seen.push(line);
    }
    let status = child.wait().unwrap();
    drop(watchdog);
    assert!(told, "no message about the process left behind: {seen:#?}");
    assert!(status.success(), "{seen:#?}");
    // The process left behind was recorded until its end.
    let r = report_json(&file, &["--processes"]);
    assert!(
        r["processes"].as_array().unwrap().len() >= 2,
        "{}",
        r["processes"]
    );
}

/// A program that leaves a FIFO where its library was (`programs/swapped.c`) does not hang
/// `tansa record` or `tansa sample` when they read the library's symbols (each opens a file
/// as soon as a stack or a sample names it; the program runs the library's code only after
/// the swap, so that neither can read the library before it: once the allocation in it
/// came before the swap, and a recorder that drained it within those microseconds named
/// its functions): the library is refused as not a regular file, its code keeps its
/// address, and the recorder, as it ends, and the report say why it has no function names.
#[test]
fn a_fifo_left_where_a_library_was_does_not_hang_the_recorders() {
    let exe = program("swapped", "swapped.c", &["-g", "-O1", "-ldl"]);
    let built = program(
        "libswapped.so",
        "swapped_lib.c",
        &["-shared", "-fPIC", "-g", "-O1"],
    );
    let dir = tempfile::tempdir().unwrap();
    for (i, (verb, ms)) in [("record", "0"), ("sample", "300")].into_iter().enumerate() {
        // A copy per run: the program renames it away.
        let lib = dir.path().join(format!("libswapped{i}.so"));
        std::fs::copy(&built, &lib).unwrap();
        let moved = dir.path().join(format!("moved{i}.so"));
        let file = dir.path().join(format!("{verb}.tansa"));
        let out = run_tansa(&[
            verb,
            "-o",
            file.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            lib.to_str().unwrap(),
            moved.to_str().unwrap(),
            ms,
        ]);
        assert!(out.status.success(), "{verb}: {}", stderr(&out));
        let why = format!(
            "no function names for {} (not a regular file)",
            lib.display()
        );
        // The recorder says so as it ends, and so does every report.
        assert!(
            stderr(&out).contains(&format!("tansa: warning: {why}")),
            "{verb}: {}",
            stderr(&out)
        );
        let meta = std::fs::symlink_metadata(&lib).unwrap();
        assert!(
            !meta.is_file(),
            "the program left a FIFO at {}",
            lib.display()
        );
        let report = report_by_function_json(&file);
        assert!(report.status.success(), "{verb}: {}", stderr(&report));
        let text = String::from_utf8_lossy(&report.stdout);
        let lib_name = format!("libswapped{i}.so!");
        assert!(text.contains(&lib_name), "{verb}: {text}");
        assert!(
            !text.contains("swapped_alloc") && !text.contains("swapped_spin"),
            "{verb}: the FIFO was read as the library: {text}"
        );
        // The report says why the library's code has no names.
        let r: Value = serde_json::from_slice(&report.stdout).unwrap();
        assert!(
            r["warnings"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w.as_str().unwrap().starts_with(&why))),
            "{verb}: {}",
            r["warnings"]
        );
        if verb == "record" {
            let units = r["units"].as_array().unwrap();
            let in_lib: Vec<&Value> = units
                .iter()
                .filter(|u| u["unit"].as_str().is_some_and(|n| n.starts_with(&lib_name)))
                .collect();
            assert_eq!(in_lib.len(), 1, "{in_lib:?}");
            assert_eq!(bytes(in_lib[0]).1, 1000, "{}", in_lib[0]);
        }
    }
}

/// A program rebuilt (a new file at its path) or deleted while it is recorded keeps its
/// function names: the file is opened as soon as a stack names it. Before, the report had
/// only addresses for it ("the file on disk is another build than the one that ran").
#[test]
fn a_program_rebuilt_or_deleted_while_recorded_keeps_its_names() {
    let other = program("rebuilt-other", "allocer.c", &["-g", "-O1"]);
    for change in [FileChange::Rebuilt, FileChange::Deleted] {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("rebuilt");
        compile(&exe, &[source("rebuilt.c")], &["-g", "-O1"]);
        let file = dir.path().join("rebuilt.tansa");
        let changer =
            change_program_later(&exe, &other, change, std::time::Duration::from_millis(500));
        let out = record(&file, &[], &[exe.to_str().unwrap(), "1000"]);
        changer.join().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let r = report_json(&file, &["--by", "function"]);
        assert_eq!(bytes(unit(&r, "rebuilt!alloc_early")).0, 1000, "{change:?}");
        assert_eq!(bytes(unit(&r, "rebuilt!alloc_late")).0, 2000, "{change:?}");
        let warnings = warnings(&r);
        assert!(
            !warnings.iter().any(|w| w.contains("no function names")),
            "{change:?}: {warnings:?}"
        );
    }
}

/// Children whose parent collects them at once end by signals the agent cannot see: the
/// kernel keeps each one's status for the pidfd the collector holds (Linux 6.15 and
/// later), so the report says how each ended, as their parent saw it, instead of "ended
/// without the agent seeing how".
#[test]
fn children_collected_by_their_parent_end_as_their_parent_saw() {
    if !require_pidfd_exit_status() {
        return;
    }
    let exe = program("reapedchildren", "reapedchildren.c", &["-O1", "-g"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.tansa");
    let o = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // What the parent collected: "PID STATUS" per child, in order A, B, C.
    let seen: Vec<(u64, u32)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let (pid, status) = l.split_once(' ').expect("PID STATUS");
            (
                pid.parse().unwrap(),
                u32::from_str_radix(status, 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen.iter().map(|s| s.1).collect::<Vec<_>>(),
        [0x6, 0x9, 0x700],
        "{seen:?}"
    );
    let r = report_json(&file, &[]);
    let processes = r["processes"].as_array().unwrap();
    let exit_of = |pid: u64| -> &Value {
        &processes
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no process {pid}: {processes:?}"))["exit"]
    };
    let (a, b, c) = (exit_of(seen[0].0), exit_of(seen[1].0), exit_of(seen[2].0));
    assert_eq!(
        (&a["kind"], &a["signal_name"]),
        (&"signaled".into(), &"SIGABRT".into()),
        "{a}"
    );
    assert_eq!(
        (&b["kind"], &b["signal_name"]),
        (&"signaled".into(), &"SIGKILL".into()),
        "{b}"
    );
    assert_eq!(
        (&c["kind"], &c["code"]),
        (&"exited".into(), &7.into()),
        "{c}"
    );
    assert_eq!(r["process"]["exit"]["code"], 0, "the parent");
}

/// Runs `tansa record -o FILE -- manyprocs N HEAVY` with the open-file limits `soft` and
/// `hard` set for tansa; returns tansa's output and its report in JSON.
fn record_many_processes(
    file: &std::path::Path,
    n: u32,
    heavy: u32,
    soft: u64,
    hard: u64,
) -> (Output, Value) {
    ensure_agent();
    let exe = program("manyprocs", "manyprocs.c", &["-g", "-O1"]);
    let mut cmd = Command::new(tansa());
    cmd.args(["record", "-o"])
        .arg(file)
        .arg("--")
        .arg(&exe)
        .arg(n.to_string())
        .arg(heavy.to_string());
    limit_open_files(&mut cmd, soft, hard);
    let out = output_within(cmd, RUN_DEADLINE);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("done 0"), "{said}");
    (out, report_json(file, &["--by", "function"]))
}

/// 1,500 processes alive at once under the usual soft limit of 1,024 open files: the
/// recorder, which keeps a socket per live process, raises its own soft limit to the hard
/// one, and every process is recorded; the program still gets the limit it was started
/// with. Before, the recording failed outright ("agent protocol error: session
/// announcement without descriptors", the kernel having dropped the descriptors it had no
/// room for), leaving only a partial file.
#[test]
fn fifteen_hundred_processes_at_once_under_a_soft_limit_of_1024_files_are_all_recorded() {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(1 << 20);
    if !require(hard >= 4096, "a hard open-file limit of at least 4096") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("many.tansa");
    let n = 1500u32;
    let (out, r) = record_many_processes(&file, n, 0, 1024, hard);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("limit 1024\n"),
        "the program's limit: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(r["processes"].as_array().unwrap().len(), n as usize + 1);
    assert!(
        r["unrecorded"].as_array().is_none_or(Vec::is_empty),
        "{}",
        r["unrecorded"]
    );
    // Child i kept 1000 + i bytes.
    let kept: i64 = (0..i64::from(n)).map(|i| 1000 + i).sum();
    assert_eq!(bytes(unit(&r, "manyprocs!main")).0, kept);
}

/// The same where the hard limit is 1,024 too: the processes the recorder has no
/// descriptor left for run unrecorded, and the report says which and why; the others are
/// recorded, and the recording is finished. The last 20 processes fill their rings: those
/// of them that are unrecorded have nobody draining theirs, and their agents find the
/// recorder's end of their socket closed, stop recording and say so, rather than wait for
/// space for ever (they did: the job hung).
#[test]
fn processes_beyond_the_recorders_open_file_limit_are_named_as_unrecorded() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("capped.tansa");
    let n = 1500u32;
    let (out, r) = record_many_processes(&file, n, 20, 1024, 1024);
    let recorded = r["processes"].as_array().unwrap().len();
    let unrecorded = r["unrecorded"].as_array().unwrap();
    assert!(!unrecorded.is_empty() && recorded > 500, "{}", stderr(&out));
    assert_eq!(recorded + unrecorded.len(), n as usize + 1);
    for u in unrecorded {
        assert!(
            u["reason"]
                .as_str()
                .is_some_and(|w| w.contains("no file descriptor left")),
            "{u}"
        );
    }
    let said = format!(
        "{} process(es) ran without being recorded",
        unrecorded.len()
    );
    assert!(
        warnings(&r).iter().any(|w| w.starts_with(&said)),
        "{:?}",
        warnings(&r)
    );
    // The heavy ones among them (the last forked, so nearly all of them) said so; each one
    // that said so is one of the unrecorded.
    let err = stderr(&out);
    let let_go: Vec<u64> = err
        .split(") let go of process ")
        .skip(1)
        .filter_map(|rest| rest.split(':').next()?.parse().ok())
        .collect();
    assert!(
        let_go.len() >= 10,
        "{let_go:?} said they were let go: {err}"
    );
    for pid in &let_go {
        assert!(unrecorded.iter().any(|u| u["pid"] == *pid), "{pid}");
    }
    assert!(!err.contains("ended before process"), "{err}");
}

/// 3,000 processes one after another, with a hard limit of 1,024 open files: the recorder
/// closes each process's socket once the process is gone, so every one is recorded. It
/// kept them all open: only 1,012 of the 3,001 were recorded (and before a refused
/// announcement was told apart, the whole recording failed: "session announcement without
/// descriptors").
#[test]
fn three_thousand_processes_one_after_another_under_1024_files_are_all_recorded() {
    ensure_agent();
    let exe = program("serialprocs", "serialprocs.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serial.tansa");
    let n = 3000i64;
    let mut cmd = Command::new(tansa());
    cmd.args(["record", "-o"])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .arg(n.to_string());
    limit_open_files(&mut cmd, 1024, 1024);
    let out = output_within(cmd, RUN_DEADLINE);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("done 0"));
    let r = report_json(&file, &["--by", "function"]);
    let processes = r["processes"].as_array().unwrap();
    assert_eq!(processes.len(), n as usize + 1);
    // Each forked child runs its parent's program with its arguments (taken from the
    // parent's session rather than read from /proc again).
    let command = serde_json::json!([exe.to_str().unwrap(), n.to_string()]);
    for p in processes {
        assert_eq!(p["exe"].as_str(), exe.to_str(), "{p}");
        assert_eq!(p["command"], command, "{p}");
    }
    assert!(
        r["unrecorded"].as_array().is_none_or(Vec::is_empty),
        "{}",
        r["unrecorded"]
    );
    let kept: i64 = (0..n).map(|i| 1000 + i).sum();
    assert_eq!(bytes(unit(&r, "serialprocs!main")).0, kept);
}

/// The recorder lets go of each process's shared memory once the process is gone and its
/// rings are drained: after 3,000 processes one after another it maps a few hundred areas,
/// not one (and some 12 KiB of memory) per process. It kept them all: a build of 65,000
/// processes would have met the kernel's limit on mappings (`vm.max_map_count`).
#[test]
fn the_recorder_unmaps_the_memory_of_processes_that_are_gone() {
    ensure_agent();
    let exe = program("serialprocs", "serialprocs.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("unmapped.tansa");
    let mut recorder = record_until_done(&[], &file, &exe, &["3000", "wait"]);
    let maps = format!("/proc/{}/maps", recorder.id());
    let count = || std::fs::read_to_string(&maps).unwrap().lines().count();
    let start = std::time::Instant::now();
    let mut mapped = count();
    while mapped >= 1000 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        mapped = count();
    }
    drop(recorder.stdin.take());
    assert!(recorder.wait().unwrap().success());
    assert!(
        mapped < 1000,
        "the recorder maps {mapped} areas after 3,000 processes"
    );
    let r = report_json(&file, &[]);
    assert_eq!(r["processes"].as_array().unwrap().len(), 3001);
}

/// An executable with allocation functions of its own (a statically linked jemalloc,
/// mimalloc or tcmalloc) comes before the agent in the dynamic linker's search order, so
/// what it allocates with them never reaches the hooks. Before, such a recording was
/// silently empty (0 events for a program that made 100 blocks); now `tansa record` and
/// every report say so, naming what the executable defines.
#[test]
fn an_executable_with_its_own_allocator_is_named_in_every_report() {
    let cases = [
        (
            "ownalloc-exported",
            "-DEXPORTED",
            "it defines malloc, calloc, realloc, free itself, and every call to them in its \
             processes (its libraries' too) goes there",
        ),
        (
            "ownalloc-hidden",
            "-DHIDDEN",
            "it defines malloc, calloc, realloc, free itself (not exported): its own calls to \
             them are not recorded",
        ),
        (
            "ownalloc-named",
            "-DNAMED",
            "it contains an allocator of its own (mi_malloc)",
        ),
    ];
    for (name, define, said) in cases {
        let exe = program(name, "ownalloc.c", &["-g", "-O1", define]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("own.tansa");
        let out = record(&file, &[], &[exe.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(printed.trim().ends_with(" 25"), "{name}: {printed}");
        let warning = format!("{} allocates past tansa's hooks: {said}", exe.display());
        assert!(stderr(&out).contains(&warning), "{name}: {}", stderr(&out));
        let r = report_json(&file, &[]);
        let warnings = r["warnings"].as_array().unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().unwrap().starts_with(&warning)),
            "{name}: {warnings:?}"
        );
        // The 100 blocks of its own allocator are not among the calls recorded.
        let mallocs = r["totals"]["calls"]["malloc"].as_u64().unwrap();
        assert!(mallocs < 100, "{name}: {mallocs} mallocs recorded");
        // The report shown at the end of an online recording says it too.
        let json = dir.path().join("online.json");
        let out = record(
            &json,
            &["--online", "--format", "json"],
            &[exe.to_str().unwrap()],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let online: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert!(
            online["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().starts_with(&warning)),
            "{name}: {online}"
        );
    }
    // A program that uses the C library's allocator gets no such warning.
    let exe = program("allocer", "allocer.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap(), "0", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("allocates past"), "{}", stderr(&out));
}

/// A CPython interpreter takes its objects of 512 bytes or less from its own allocator,
/// pymalloc, in arenas it maps itself: a recording of a Python program held its arenas'
/// bookkeeping and nothing of the 100,000 strings it made, and no report said why. Now
/// every report names the interpreter and says how to record every object, unless the
/// program ran with `PYTHONMALLOC=malloc`; then each object is a `malloc` recorded.
#[test]
fn a_python_interpreter_with_objects_in_its_own_arenas_is_named() {
    ensure_agent();
    // Debian's python3 (.ci/install-deps): one executable, with the interpreter in it.
    let python = std::fs::canonicalize("/usr/bin/python3")
        .expect("/usr/bin/python3 (Debian's python3 package, from .ci/install-deps)");
    let script = "x = [str(i) for i in range(100000)]";
    let dir = tempfile::tempdir().unwrap();
    let run = |file: &std::path::Path, online: bool, pythonmalloc: Option<&str>| {
        let mut cmd = Command::new(tansa());
        cmd.args(["record", "-o", file.to_str().unwrap()]);
        if online {
            cmd.args(["--online", "--format", "json"]);
        }
        cmd.args(["--", "/usr/bin/python3", "-c", script]);
        match pythonmalloc {
            Some(v) => cmd.env("PYTHONMALLOC", v),
            None => cmd.env_remove("PYTHONMALLOC"),
        };
        let out = output_within(cmd, RUN_DEADLINE);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let warning = format!(
        "{} allocates past tansa's hooks: it is a CPython interpreter, which takes its \
         objects of 512 bytes or less",
        python.display()
    );
    let said = |warnings: &[Value]| {
        warnings.iter().filter_map(Value::as_str).any(|w| {
            w.starts_with(&warning) && w.ends_with("PYTHONMALLOC=malloc to record every object")
        })
    };
    // pymalloc: said by `tansa record`, the report, and the online report.
    let file = dir.path().join("pymalloc.tansa");
    let out = run(&file, false, None);
    assert!(stderr(&out).contains(&warning), "{}", stderr(&out));
    let r = report_json(&file, &[]);
    assert!(said(r["warnings"].as_array().unwrap()), "{}", r["warnings"]);
    let pymalloc_calls = r["totals"]["calls"]["malloc"].as_u64().unwrap();
    assert!(
        pymalloc_calls < 100_000,
        "{pymalloc_calls} mallocs under pymalloc"
    );
    let json = dir.path().join("pymalloc.json");
    run(&json, true, None);
    let online: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(said(online["warnings"].as_array().unwrap()), "{online}");
    // PYTHONMALLOC=malloc (and its debug variant): every string is a malloc recorded, and
    // no report warns.
    for value in ["malloc", "malloc_debug"] {
        let file = dir.path().join(format!("{value}.tansa"));
        let out = run(&file, false, Some(value));
        assert!(
            !stderr(&out).contains("CPython"),
            "{value}: {}",
            stderr(&out)
        );
        let r = report_json(&file, &[]);
        assert!(
            !said(r["warnings"].as_array().unwrap()),
            "{value}: {}",
            r["warnings"]
        );
        let calls = r["totals"]["calls"]["malloc"].as_u64().unwrap();
        assert!(calls >= 100_000, "{value}: {calls} mallocs");
        let json = dir.path().join(format!("{value}.json"));
        run(&json, true, Some(value));
        let online: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert!(
            !said(online["warnings"].as_array().unwrap()),
            "{value}: {online}"
        );
    }
}

/// V8 (node) and the Go runtime keep their objects in garbage-collected heaps that no
/// `malloc` reaches: a recording of a node script that made 100,000 objects, or of a Go
/// program that made 10,000 slices, held a few native blocks and said nothing. Now every
/// report names the runtime, says its objects are not recorded, and where to see them.
#[test]
fn the_garbage_collected_heaps_of_node_and_go_are_named() {
    ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    let warned = |file: &std::path::Path, out: &Output, what: &str| -> String {
        assert!(out.status.success(), "{}", stderr(out));
        let r = report_json(file, &[]);
        let w: Vec<String> = warnings(&r)
            .into_iter()
            .filter(|w| w.contains("allocates past tansa's hooks") && w.contains(what))
            .collect();
        assert_eq!(w.len(), 1, "{what}: {:?}", warnings(&r));
        assert!(stderr(out).contains(&w[0]), "{}", stderr(out));
        w[0].clone()
    };
    // node (.ci/install-deps: nodejs), whose V8 is in its executable or in libnode.
    if tansa_testkit::require(have("node"), "node (nodejs, from .ci/install-deps)") {
        let file = dir.path().join("node.tansa");
        let script = "let a = []; for (let i = 0; i < 100000; i++) a.push({ i });";
        let out = record(&file, &[], &["node", "-e", script]);
        let w = warned(&file, &out, "it runs JavaScript on V8");
        let module = w.split(" allocates past").next().unwrap();
        let name = module.rsplit('/').next().unwrap();
        assert!(name == "node" || name.starts_with("libnode.so"), "{w}");
        assert!(w.contains("node --heapsnapshot-signal"), "{w}");
    }
    // A Go program that uses cgo (.ci/install-deps: golang-go), so linked dynamically.
    if tansa_testkit::require(go_available(), "go (golang-go, from .ci/install-deps)") {
        let src = dir.path().join("main.go");
        std::fs::write(
            &src,
            "package main\n\n// #include <stdlib.h>\nimport \"C\"\nimport \"fmt\"\n\n\
             func main() {\n\tC.free(C.malloc(100))\n\ts := [][]byte{}\n\t\
             for i := 0; i < 10000; i++ {\n\t\ts = append(s, make([]byte, 100))\n\t}\n\t\
             fmt.Println(len(s))\n}\n",
        )
        .unwrap();
        let exe = dir.path().join("cgoheap");
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(&exe)
            .arg(&src)
            .current_dir(dir.path())
            .env("GOCACHE", build_dir().join("gocache"))
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "")
            .env("CGO_ENABLED", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "go build: {}", stderr(&out));
        let file = dir.path().join("go.tansa");
        let out = record(&file, &[], &[exe.to_str().unwrap()]);
        let w = warned(&file, &out, "it is a Go program");
        assert!(
            w.starts_with(&format!("{} allocates past", exe.display())),
            "{w}"
        );
        // Its C allocation is recorded; its 10,000 slices are not.
        let r = report_json(&file, &[]);
        let mallocs = r["totals"]["calls"]["malloc"].as_u64().unwrap();
        assert!((1..10_000).contains(&mallocs), "{mallocs} mallocs");
    }
    // A C program is none of these.
    let exe = program("allocer", "allocer.c", &["-g", "-O1"]);
    let file = dir.path().join("plain.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap(), "0", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("allocates past"), "{}", stderr(&out));
}
