//! The exit-status table of the README, command by command, on real recordings made at
//! test time and on damaged and crafted copies of them: 0 success, 1 nothing produced
//! (a file that cannot be read or is of the wrong kind), 2 command-line misuse, 3 a
//! partial report of a damaged file. Warnings and errors go to standard error and name the
//! file, the byte and the frame; the memory of `tansa report` on a crafted file stays
//! bounded by the file.

mod common;

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};

use common::*;
use tansa_format::container::FRAME_HEADER_LEN;
use tansa_format::memory;
use tansa_fuzz::craft::{self, Recording};
use tansa_wire::event::Tag;

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A real recording of the Fig. 3 program.
fn memory_recording(dir: &Path) -> PathBuf {
    let f = fig3("O0", &["-O0", "-fno-omit-frame-pointer"]);
    let file = dir.join("fig3.tansa");
    let o = record(
        &file,
        &[],
        &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    file
}

/// `bytes` cut at `fraction` of their length, written next to `dir`.
fn cut(dir: &Path, name: &str, bytes: &[u8], fraction: f64) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, &bytes[..(bytes.len() as f64 * fraction) as usize]).unwrap();
    path
}

/// Asserts the damage warning of `path` on standard error: file, byte, frame.
fn assert_damage_warning(o: &Output, path: &Path) {
    let e = stderr(o);
    let prefix = format!("tansa: warning: {}: ", path.display());
    assert!(
        e.lines()
            .any(|l| l.starts_with(&prefix) && l.contains("at byte") && l.contains("(frame")),
        "{e}"
    );
    assert!(!e.contains("panicked") && !e.contains("Corrupt {"), "{e}");
}

#[test]
fn report_dump_and_annotate_follow_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = memory_recording(dir.path());
    let f = file.to_str().unwrap();

    // 0: success, nothing on standard error.
    for args in [vec!["report", f], vec!["dump", f, "--events"]] {
        let o = run_tansa(&args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("warning"), "{args:?}: {}", stderr(&o));
    }

    // 2: misuse, whether clap or the file finds it.
    for args in [
        vec!["report", f, "--by", "planet"],
        vec!["report", f, "--by", "process"],
        vec!["report", f, "--pid", "4194304"],
        vec!["report", f, "--interval", "0ms"],
        vec!["dump"],
        vec!["retrace"],
    ] {
        let o = run_tansa(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(out(&o).is_empty(), "{args:?}");
    }

    // 1: nothing produced (missing, not a recording, of the wrong kind).
    let garbage = dir.path().join("garbage.tansa");
    std::fs::write(&garbage, b"#!/bin/sh\necho not a recording\n").unwrap();
    let g = garbage.to_str().unwrap();
    let missing = dir.path().join("missing.tansa");
    let m = missing.to_str().unwrap();
    for (args, says) in [
        (vec!["report", m], "cannot open it"),
        (vec!["dump", m], "cannot open it"),
        (vec!["annotate", m, "main"], "cannot open it"),
        (vec!["report", g], "not a tansa recording"),
        (vec!["dump", g], "not a tansa recording"),
        (vec!["annotate", g, "main"], "not a tansa recording"),
        (vec!["annotate", f, "main"], "a memory recording"),
        (vec!["retrace", f], "a memory recording"),
    ] {
        let o = run_tansa(&args);
        assert_eq!(code(&o), 1, "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.starts_with("tansa: error: ") && e.contains(says),
            "{args:?}: {e}"
        );
        assert!(out(&o).is_empty(), "{args:?}: {}", out(&o));
    }

    // 3: damaged or truncated, with the part before the damage on standard output and
    // the warning (file, byte, frame) on standard error.
    let bytes = std::fs::read(&file).unwrap();
    let truncated = cut(dir.path(), "cut.tansa", &bytes, 0.7);
    let t = truncated.to_str().unwrap();
    let o = run_tansa(&["report", t]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(out(&o).contains("tansa heap report"), "{}", out(&o));
    assert_damage_warning(&o, &truncated);
    let o = run_tansa(&["dump", t]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(out(&o).contains("frame 0x0001"), "{}", out(&o));
    assert!(
        !out(&o).contains("error") && !out(&o).contains("incomplete"),
        "{}",
        out(&o)
    );
    assert_damage_warning(&o, &truncated);
    // A file cut after its last frame but before its end marker.
    let unfinished = dir.path().join("unfinished.tansa");
    std::fs::write(&unfinished, &bytes[..bytes.len() - FRAME_HEADER_LEN]).unwrap();
    for cmd in ["report", "dump"] {
        let o = run_tansa(&[cmd, unfinished.to_str().unwrap()]);
        assert_eq!(code(&o), 3, "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("without its end marker"),
            "{}",
            stderr(&o)
        );
    }
}

/// Builds `tansa-ptrace/tests/programs/region.c` (flags recorded in the source).
fn region(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tansa-ptrace/tests/programs/region.c");
    let out = dir.join("region");
    compile(&out, &[src], &["-O1", "-g", "-fno-inline"]);
    out
}

#[test]
fn retrace_follows_the_rule_of_report() {
    let dir = tempfile::tempdir().unwrap();
    let exe = region(dir.path());
    let file = dir.path().join("r.tansa");
    let f = file.to_str().unwrap();
    let o = run_tansa(&[
        "retrace",
        "record",
        "--region",
        "work",
        "--period",
        "7",
        "--executions",
        "20",
        "-o",
        f,
        "--",
        exe.to_str().unwrap(),
        "100",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = run_tansa(&["retrace", f]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    // Without its summary and end marker (and some executions): a partial report, exit 3.
    let bytes = std::fs::read(&file).unwrap();
    let rec = Recording::decode(&bytes).unwrap();
    let keep = rec.frames.len() - 1;
    let frames = craft::frames(&bytes);
    let truncated = dir.path().join("cut.tansa");
    let end = frames[keep].range.start + FRAME_HEADER_LEN + 3;
    std::fs::write(&truncated, &bytes[..end]).unwrap();
    let o = run_tansa(&["retrace", truncated.to_str().unwrap()]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(out(&o).contains("rebuilt trace"), "{}", out(&o));
    assert_damage_warning(&o, &truncated);
    // Cut inside its first frames: nothing to report, exit 1.
    let early = cut(dir.path(), "early.tansa", &bytes, 0.01);
    let o = run_tansa(&["retrace", early.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).starts_with("tansa: error: "), "{}", stderr(&o));
}

/// Runs `tansa args...` and returns its exit status, standard error and peak resident
/// memory in bytes.
fn run_measured(args: &[&str]) -> (ExitStatus, String, u64) {
    ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    // Reaped with wait4 below (for its resource usage), not with Child::wait.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(tansa())
        .args(args)
        .stdout(File::create(dir.path().join("stdout")).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    (
        ExitStatus::from_raw(status),
        err,
        usage.ru_maxrss as u64 * 1024,
    )
}

/// The memory `tansa report` may use on a file of `n` bytes: 64 MiB plus 64 times the
/// file.
fn bound(n: usize) -> u64 {
    (64 << 20) + 64 * n as u64
}

#[test]
fn crafted_recordings_keep_the_memory_of_report_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let file = memory_recording(dir.path());
    let bytes = std::fs::read(&file).unwrap();
    let write = |name: &str, data: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        p
    };

    // Stack id 0xFFFFFFFF, in its definition and in the events that use it: the same
    // report as the original.
    let mut rec = Recording::decode(&bytes).unwrap();
    rec.unchunk();
    let to_max = |v: u64| (v == 1).then_some(u64::from(u32::MAX));
    assert!(rec.rewrite_field(memory::META_CHUNK, &[Tag::StackDef], 0, to_max) >= 1);
    let allocs = [Tag::Malloc, Tag::Calloc, Tag::Memalign, Tag::PosixMemalign];
    rec.rewrite_field(memory::THREAD_CHUNK, &allocs, 3, to_max);
    rec.rewrite_field(memory::THREAD_CHUNK, &[Tag::Realloc], 5, to_max);
    rec.rewrite_field(memory::THREAD_CHUNK, &[Tag::Free], 2, to_max);
    let crafted = rec.encode(true);
    let stack_ids = write("stack-ids.tansa", &crafted);
    let (status, err, rss) = run_measured(&["report", stack_ids.to_str().unwrap()]);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(rss < bound(crafted.len()), "{rss} bytes resident");
    let original = report_json(&file, &[]);
    let got = report_json(&stack_ids, &[]);
    assert_eq!(got["units"], original["units"]);

    // Sizes of 2^63 and more: damage, not negative bytes.
    let mut rec = Recording::decode(&bytes).unwrap();
    rec.unchunk();
    rec.rewrite_field(memory::THREAD_CHUNK, &[Tag::Malloc], 2, |v| {
        (v == 100).then_some((1 << 63) + 100)
    });
    let sizes = write("sizes.tansa", &rec.encode(true));
    let o = run_tansa(&["report", sizes.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("more than any allocator can return"),
        "{}",
        stderr(&o)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for u in r["units"].as_array().unwrap() {
        assert!(u["net_bytes"].as_i64().unwrap() >= 0, "{u}");
    }

    // A frame header claiming 1 GiB after the last frame (the end marker replaced).
    let mut claim = bytes[..bytes.len() - FRAME_HEADER_LEN].to_vec();
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[0..2].copy_from_slice(&memory::THREAD_CHUNK.0.to_le_bytes());
    h[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    h[8..12].copy_from_slice(&(1u32 << 30).to_le_bytes());
    claim.extend_from_slice(&h);
    claim.extend_from_slice(&[0x5a; 100]);
    craft::fix_checksums(&mut claim);
    let gib = write("gib.tansa", &claim);
    let (status, err, rss) = run_measured(&["report", gib.to_str().unwrap()]);
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(
        err.contains("the file ends in the middle of a frame at byte"),
        "{err}"
    );
    assert!(rss < bound(claim.len()), "{rss} bytes resident");
}

#[test]
fn a_one_nanosecond_interval_is_lengthened_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = memory_recording(dir.path());
    for interval in ["1ns", "10ns"] {
        let o = run_tansa(&[
            "report",
            file.to_str().unwrap(),
            "--by",
            "interval",
            "--interval",
            interval,
            "--format",
            "json",
        ]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let used = r["interval_ns"].as_u64().unwrap();
        let duration = r["duration_ns"].as_u64().unwrap();
        assert!(duration / used < 10_000, "{used} ns over {duration} ns");
        let e = stderr(&o);
        assert!(
            e.contains(&format!(
                "intervals of {interval} would make more than 10000 intervals"
            )),
            "{e}"
        );
    }
}

/// A record cut at a chunk's end continues in the next chunk of the same stream, which is
/// not damage: `tansa dump` exits 0 without warnings. (The recording's first thread chunk is
/// split in two in the middle of a record, as the recorder may write it.)
#[test]
fn dump_reads_records_that_span_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let file = memory_recording(dir.path());
    let mut rec = Recording::decode(&std::fs::read(&file).unwrap()).unwrap();
    let i = rec
        .frames
        .iter()
        .position(|f| f.ty == memory::THREAD_CHUNK && f.payload.len() > 64)
        .expect("a thread chunk");
    let chunk = rec.frames[i].clone();
    // The prefix (session, stream) starts both halves; cut 3 bytes into the third record
    // or so, surely inside one.
    let cut_at = 8 + (chunk.payload.len() - 8) / 2 + 1;
    let mut first = chunk.clone();
    first.payload.truncate(cut_at);
    let mut second = chunk.clone();
    second.payload = [&chunk.payload[..8], &chunk.payload[cut_at..]].concat();
    rec.frames.splice(i..=i, [first, second]);
    let split = dir.path().join("split.tansa");
    std::fs::write(&split, rec.encode(true)).unwrap();
    let o = run_tansa(&["dump", split.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    // And the report reads the same events from both files.
    let whole = run_tansa(&["report", file.to_str().unwrap(), "--format", "json"]);
    let halves = run_tansa(&["report", split.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code(&halves), 0, "{}", stderr(&halves));
    assert_eq!(out(&whole), out(&halves));
}

/// A reader that goes away early (`tansa report ... | head -c1`) is not an error, in
/// every format: the JSON writer's closed pipe was reported as "Broken pipe", status 1.
#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    // Enough output to fill a pipe: a row for each of 3,000 threads.
    let exe = program("threadchurn", "threadchurn.c", &["-g", "-O2", "-pthread"]);
    let file = dir.path().join("threads.tansa");
    let o = record(&file, &[], &[exe.to_str().unwrap(), "3000", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for format in ["table", "json", "csv"] {
        let mut child = Command::new(tansa())
            .args([
                "report",
                file.to_str().unwrap(),
                "--by",
                "thread",
                "--format",
                format,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run tansa");
        let mut stdout = child.stdout.take().unwrap();
        let mut one = [0u8; 1];
        stdout.read_exact(&mut one).unwrap();
        drop(stdout);
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{format}: {err}");
        assert!(!err.contains("Broken pipe"), "{format}: {err}");
    }
}
