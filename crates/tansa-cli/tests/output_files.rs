//! Recordings are created safely: private (mode 0600), through a temporary file moved into
//! place at the end (none left behind), a default name never follows a symbolic link nor
//! replaces a file (a number is added), and a recording whose command was killed is kept.
//! A recorder killed outright leaves its temporary file: the next report completes it and
//! moves it into place, or says why it cannot.

mod common;

use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs tansa in `dir` (where default names go).
fn tansa_in(dir: &Path, args: &[&str]) -> std::process::Output {
    ensure_agent();
    let mut cmd = Command::new(tansa());
    cmd.current_dir(dir).args(args);
    output_within(cmd, RUN_DEADLINE)
}

#[test]
fn recordings_are_private_and_no_temporary_file_is_left() {
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let o = tansa_in(dir.path(), &["record", "--", exe.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let files = names(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].starts_with("tansa-allocer-") && files[0].ends_with(".tansa"),
        "{files:?}"
    );
    let mode = std::fs::metadata(dir.path().join(&files[0]))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
}

#[test]
fn a_default_name_never_follows_a_link_nor_replaces_a_file() {
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    // `tansa sample`'s default name is predictable: plant a link there.
    let planted = dir.path().join("tansa-sample-allocer.tansa");
    symlink(&victim, &planted).unwrap();
    let sample = |dir: &Path| {
        tansa_in(
            dir,
            &["sample", "--source", "agent", "--", exe.to_str().unwrap()],
        )
    };
    let o = sample(dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&planted).unwrap().is_symlink());
    let numbered = dir.path().join("tansa-sample-allocer.1.tansa");
    assert!(numbered.exists(), "{:?}", names(dir.path()));
    assert!(
        stderr(&o).contains("tansa-sample-allocer.1.tansa"),
        "the name used is said: {}",
        stderr(&o)
    );
    // A second run does not replace the first recording either.
    let first = std::fs::read(&numbered).unwrap();
    let o = sample(dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&numbered).unwrap(), first);
    assert!(dir.path().join("tansa-sample-allocer.2.tansa").exists());
    assert!(
        !names(dir.path()).iter().any(|n| n.ends_with(".tmp")),
        "{:?}",
        names(dir.path())
    );
}

#[test]
fn an_explicit_name_replaces_a_link_without_following_it() {
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let out = dir.path().join("out.tansa");
    symlink(&victim, &out).unwrap();
    let o = tansa_in(
        dir.path(),
        &[
            "record",
            "-o",
            out.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
    let r = run_tansa(&["report", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", stderr(&r));
}

#[test]
fn the_recording_of_a_killed_command_is_kept() {
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let script = format!("{} 0; kill -9 $$", exe.display());
    let o = tansa_in(dir.path(), &["record", "--", "sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(128 + 9), "{}", stderr(&o));
    let files: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.ends_with(".tansa"))
        .collect();
    assert_eq!(files.len(), 1, "{:?}", names(dir.path()));
    let file = dir.path().join(&files[0]);
    let r = run_tansa(&["report", file.to_str().unwrap(), "--format", "json"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(String::from_utf8_lossy(&r.stdout).contains("allocer"));
}

/// The temporary file of the recording `file` that process `pid` writes (its first).
fn temporary(file: &Path, pid: u32) -> PathBuf {
    file.with_file_name(format!(
        ".{}.{pid}.0.tmp",
        file.file_name().unwrap().to_string_lossy()
    ))
}

/// Starts `tansa record --durable never -o FILE -- durable 300 4000`, checks that a report
/// meanwhile refuses the recording, waits until the 300 blocks' events and their stacks are
/// in its temporary file (the collector writes out what is a second old), and kills the
/// recorder, then the program, with SIGKILL. Returns the recorder's pid and that file.
fn record_then_kill_the_recorder(file: &Path) -> (u32, PathBuf) {
    use tansa_format::memory::{META_CHUNK, THREAD_CHUNK};
    let (mut recorder, pid) = start_durable_program(
        &["record", "--durable", "never", "-o", file.to_str().unwrap()],
        &["300", "4000"],
        &[],
    );
    let temp = temporary(file, recorder.id());
    assert_still_recording(file, recorder.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let types = frame_types(&temp);
        if types.contains(&THREAD_CHUNK) && types.contains(&META_CHUNK) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing written to {}: {types:?}",
            temp.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let recorder_pid = recorder.id();
    kill_both(&mut recorder, pid);
    (recorder_pid, temp)
}

/// Checks that the report `out` succeeded and said it completed what the killed `recorder`
/// left; returns its standard error.
fn completed_by_report(out: &std::process::Output, recorder: u32) -> String {
    let err = stderr(out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "its recorder (pid {recorder}) was killed; completed it from"
        )),
        "{err}"
    );
    err
}

/// The processes `pid` started (its threads' children).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[test]
fn a_heap_recording_whose_recorder_was_killed_is_completed_by_the_next_report() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("killed.tansa");
    let (recorder, temp) = record_then_kill_the_recorder(&file);
    assert!(!file.exists());
    // While another process holds its lock (a report completing it), a report says so,
    // rather than naming the dead recorder as recording it.
    {
        let _held = hold_lock(&temp);
        let busy = run_tansa(&["report", file.to_str().unwrap()]);
        assert!(!busy.status.success());
        assert!(
            stderr(&busy).contains(&format!(
                "is being completed by another process right now (its recorder, pid \
                 {recorder}, was killed"
            )),
            "{}",
            stderr(&busy)
        );
    }
    let out = report_by_function_json(&file);
    completed_by_report(&out, recorder);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // Functions are named: the symbols were resolved when it was completed.
    let main = unit(&report, "durable!main");
    assert_eq!(calls(main).0, 300, "{main}");
    assert_eq!(bytes(main).1, 300 * 4000, "{main}");
    assert_eq!(report["processes"][0]["exit"]["kind"], "recorder_killed");
    // Not durable: what the program did after the kill is in no file, and the report says
    // so (it said only that the recording was salvaged).
    assert!(
        report["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("what the programs did after that, and what the agents' buffers still held, is not in it")),
        "{}",
        report["warnings"]
    );
    // In place, private, and no temporary file left; the next report just reads it.
    assert_eq!(names(dir.path()), ["killed.tansa"]);
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    let again = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        !stderr(&again).contains("completed it"),
        "{}",
        stderr(&again)
    );
}

/// The leftover of a killed recorder is named by the next recording of that name (which
/// then takes the name), and completed when read by its own name, next to it.
#[test]
fn a_leftover_is_named_by_the_next_recording_and_completed_by_its_own_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("again.tansa");
    let (recorder, temp) = record_then_kill_the_recorder(&file);
    let next = run_tansa(&["record", "-o", file.to_str().unwrap(), "--", "true"]);
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        stderr(&next).contains(&format!(
            "{} is an unfinished recording a killed tansa (pid {recorder}) left",
            temp.display(),
        )),
        "{}",
        stderr(&next)
    );
    let out = report_by_function_json(&temp);
    assert!(out.status.success(), "{}", stderr(&out));
    let moved = dir.path().join("again.1.tansa");
    assert!(
        stderr(&out).contains(&format!("completed it and moved it to {}", moved.display())),
        "{}",
        stderr(&out)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(calls(unit(&report, "durable!main")).0, 300);
    assert_eq!(names(dir.path()), ["again.1.tansa", "again.tansa"]);
}

/// A recorder killed before its first checkpoint (half a second into sampling) leaves
/// nothing to complete, and the report says so. The kill must come before that checkpoint:
/// an attempt that took longer from the start of tansa (a loaded machine) is not one, and
/// is tried again.
#[test]
fn a_cpu_recording_killed_before_its_first_checkpoint_is_explained() {
    let mut slow = Vec::new();
    let (dir, file, recorder) = loop {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cpu.tansa");
        let started = Instant::now();
        let (mut recorder, pid) =
            start_durable_program(&["sample", "-o", file.to_str().unwrap()], &["1", "16"], &[]);
        kill_both(&mut recorder, pid);
        let took = started.elapsed();
        if took < Duration::from_millis(450) {
            break (dir, file, recorder);
        }
        slow.push(took);
        assert!(
            slow.len() < 5,
            "no attempt killed its recorder within 0.45 s of starting it: {slow:?}"
        );
    };
    let out = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "is what its recorder (pid {}) left when it was killed, and it cannot be \
             completed: its recorder was killed before its first checkpoint (0.5 s into \
             sampling): nothing it sampled was written",
            recorder.id()
        )),
        "{}",
        stderr(&out)
    );
    // Nothing is removed, and the next recording of that name says what is there.
    let temp = temporary(&file, recorder.id());
    assert!(temp.exists());
    let next = run_tansa(&["sample", "-o", file.to_str().unwrap(), "--", "true"]);
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        stderr(&next).contains(&format!(
            "{} is an unfinished recording a killed tansa (pid {}) left",
            temp.display(),
            recorder.id()
        )),
        "{}",
        stderr(&next)
    );
    drop(dir);
}

/// A run killed early keeps most of what it sampled: the first checkpoint is written half a
/// second into sampling, and the next ones each time the time elapsed has doubled, up to
/// 2 s apart. A run of about 1.3 s (finished, with perf, then with the agent) therefore
/// holds a checkpoint group from its first half: its totals at that moment, which `tansa
/// dump` shows.
#[test]
fn a_cpu_recording_checkpoints_from_half_a_second_into_sampling() {
    let spin = program("spin", "spin.c", &["-g", "-O1", "-pthread"]);
    for source in ["perf", "agent"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cpu.tansa");
        let f = file.to_str().unwrap();
        let o = run_tansa(&[
            "sample",
            "--source",
            source,
            "-o",
            f,
            "--",
            spin.to_str().unwrap(),
            "6000",
        ]);
        assert!(o.status.success(), "{source}: {}", stderr(&o));
        let dump = run_tansa(&["dump", f]);
        assert!(dump.status.success(), "{source}: {}", stderr(&dump));
        // JSON lines are a heap recording's streams: asked of this file, a usage error
        // says so, where it printed nothing and succeeded.
        let jsonl = run_tansa(&["dump", f, "--format", "jsonl"]);
        assert_eq!(jsonl.status.code(), Some(2), "{source}: {}", stderr(&jsonl));
        assert!(
            jsonl.stdout.is_empty()
                && stderr(&jsonl).contains(
                    "--format jsonl prints the event streams of a heap \
                     recording"
                )
                && stderr(&jsonl).contains("this is a CPU recording"),
            "{source}: {}",
            stderr(&jsonl)
        );
        let text = String::from_utf8_lossy(&dump.stdout).into_owned();
        // (samples, wall_ns) of each checkpoint, in order.
        let field = |line: &str, name: &str| -> u64 {
            line.split(&format!("{name}: "))
                .nth(1)
                .and_then(|rest| rest.split([',', ' ']).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{source}: no {name} in {line}"))
        };
        let checkpoints: Vec<(u64, u64)> = text
            .lines()
            .filter(|l| l.contains(" checkpoint Checkpoint {"))
            .map(|l| (field(l, "samples"), field(l, "wall_ns")))
            .collect();
        let (samples, wall_ns) = *checkpoints
            .first()
            .unwrap_or_else(|| panic!("{source}: no checkpoint in a 1.3 s run:\n{text}"));
        assert!(
            (500_000_000..2_000_000_000).contains(&wall_ns),
            "{source}: the first checkpoint at {wall_ns} ns: {checkpoints:?}"
        );
        // Samples of the first half second (how many depends on the CPU the program had).
        assert!(samples > 0, "{source}: {checkpoints:?}");
        for w in checkpoints.windows(2) {
            assert!(
                w[1].0 >= w[0].0 && w[1].1 > w[0].1 * 3 / 2,
                "{source}: {checkpoints:?}"
            );
        }
        // The finished recording's total holds the checkpoints' samples.
        let summary = text
            .lines()
            .find(|l| l.contains(" summary CpuSummary {"))
            .unwrap_or_else(|| panic!("{source}: no summary:\n{text}"));
        assert!(
            field(summary, "samples") >= checkpoints.last().unwrap().0,
            "{source}: {summary}"
        );
    }
}

/// The samples of the last checkpoint in the CPU recording at `path` (`tansa dump`), 0
/// when there is none yet.
fn last_checkpoint_samples(path: &Path) -> u64 {
    let dump = run_tansa(&["dump", path.to_str().unwrap()]);
    String::from_utf8_lossy(&dump.stdout)
        .lines()
        .filter(|l| l.contains(" checkpoint Checkpoint {"))
        .filter_map(|l| {
            l.split("samples: ")
                .nth(1)?
                .split([',', ' '])
                .next()?
                .parse()
                .ok()
        })
        .next_back()
        .unwrap_or(0)
}

/// `tansa sample` (with perf, then with the agent) writes checkpoints while it samples:
/// killed outright after the first, it leaves a file that the next report completes from
/// that checkpoint, with the functions named, and moves into place.
#[test]
fn a_cpu_recording_whose_recorder_was_killed_is_completed_from_its_last_checkpoint() {
    let spin = program("spin", "spin.c", &["-g", "-O1", "-pthread"]);
    for source in ["perf", "agent"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cpu.tansa");
        // About 40 s of work: killed long before it ends.
        let mut recorder = Command::new(tansa())
            .args([
                "sample",
                "--source",
                source,
                "-o",
                file.to_str().unwrap(),
                "--",
            ])
            .arg(&spin)
            .arg("100000")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run tansa");
        let temp = temporary(&file, recorder.id());
        // Until a checkpoint holds 150 samples: the first comes half a second in, and on a
        // loaded machine the program may have had a tenth of a CPU by then (51 samples once).
        let deadline = Instant::now() + Duration::from_secs(60);
        while last_checkpoint_samples(&temp) < 150 {
            assert!(
                Instant::now() < deadline,
                "{source}: no checkpoint of 150 samples in {}: {:?}",
                temp.display(),
                frame_types(&temp)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let recorder_pid = recorder.id();
        let program = children(recorder_pid);
        kill(recorder_pid, libc::SIGKILL);
        let _ = recorder.wait();
        // The program runs on unobserved, as under perf; it is not needed any more.
        for pid in program {
            kill(pid, libc::SIGKILL);
        }
        assert!(!file.exists());

        let out = report_by_function_json(&file);
        let err = completed_by_report(&out, recorder_pid);
        let kept: u64 = err
            .split("it holds the ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{source}: no count of samples kept: {err}"));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(report["total_samples"], kept, "{source}");
        assert!(kept >= 150, "{source}: {kept} samples");
        // Named from the files on disk: hot_a takes about 70 % of the samples.
        let self_of = |name: &str| -> u64 {
            report["units"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|u| u["unit"] == format!("spin!{name}"))
                .map(|u| u["self_samples"].as_u64().unwrap_or(0))
                .sum()
        };
        let (a, b) = (self_of("hot_a"), self_of("hot_b"));
        assert!(
            a + b > kept * 8 / 10,
            "{source}: {a} + {b} of {kept}: {report}"
        );
        // The in-process sampler's split varies more (a CI run gave 194 and 188; three
        // runs beside a CI run, between 2 and 4.4 to 1): there the names are what is
        // checked, hot_a still ahead.
        if source == "perf" {
            assert!(a > b * 3 / 2, "{source}: hot_a {a}, hot_b {b}");
        } else {
            assert!(a > b, "{source}: hot_a {a}, hot_b {b}");
        }
        assert!(
            report["warnings"].as_array().unwrap().iter().any(|w| w
                .as_str()
                .unwrap()
                .contains("completed from its last checkpoint")),
            "{source}: {}",
            report["warnings"]
        );
        // In place, private, nothing left; the next report just reads it.
        assert_eq!(names(dir.path()), ["cpu.tansa"], "{source}");
        assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
        let again = run_tansa(&["report", file.to_str().unwrap()]);
        assert!(again.status.success(), "{}", stderr(&again));
        assert!(
            !stderr(&again).contains("completed it"),
            "{}",
            stderr(&again)
        );
    }
}

/// A directory holding `in.tansa`, a recording of `allocer`; and the program.
fn recorded_allocer() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("in.tansa");
    let o = tansa_in(
        dir.path(),
        &[
            "record",
            "-o",
            rec.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    (dir, exe, rec)
}

/// Every command that writes a file with `-o` (reports, diffs, the online report, exports,
/// flame graphs, HTML pages) replaces a symbolic link at that name instead of writing
/// through it, creates nothing through a dangling link, refuses a name that is one of its
/// input recordings (which would be lost), and says that a directory cannot be written
/// without leaving anything behind in it.
#[test]
fn every_output_named_with_dash_o_is_written_safely() {
    let (dir, exe, rec) = recorded_allocer();
    let d = dir.path();
    let recording = std::fs::read(&rec).unwrap();
    let r = rec.to_str().unwrap();
    let exe = exe.to_str().unwrap();
    let commands: Vec<(&str, Vec<&str>)> = vec![
        ("report", vec!["report", r]),
        ("diff", vec!["diff", r, r]),
        (
            "online",
            vec!["record", "--online", "--live", "never", "--", exe],
        ),
        ("export", vec!["export", "--format", "collapsed", r]),
        ("flamegraph", vec!["flamegraph", r]),
        ("html", vec!["html", r]),
    ];
    let victim = d.join("victim");
    for (name, args) in &commands {
        let run = |out: &Path| {
            let mut a: Vec<&str> = args.clone();
            // `-o` before `--` (the online recording's command follows it).
            let at = a.iter().position(|&x| x == "--").unwrap_or(a.len());
            a.insert(at, "-o");
            a.insert(at + 1, out.to_str().unwrap());
            tansa_in(d, &a)
        };
        // Through a link to an existing file: the link is replaced, the file untouched.
        std::fs::write(&victim, "precious").unwrap();
        let link = d.join(format!("{name}.link"));
        symlink(&victim, &link).unwrap();
        let o = run(&link);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{name}"
        );
        let md = std::fs::symlink_metadata(&link).unwrap();
        assert!(md.is_file() && md.len() > 0, "{name}: {md:?}");
        assert_eq!(md.mode() & 0o777, 0o600, "{name}");
        // Through a dangling link: nothing is created at its target.
        let target = d.join(format!("{name}.created"));
        let dangling = d.join(format!("{name}.dangling"));
        symlink(&target, &dangling).unwrap();
        let o = run(&dangling);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(!target.exists(), "{name} wrote through a dangling link");
        // A directory: refused, and nothing left in it.
        let sub = d.join(format!("{name}.dir"));
        std::fs::create_dir(&sub).unwrap();
        let o = run(&sub);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("is a directory"),
            "{name}: {}",
            stderr(&o)
        );
        assert!(names(&sub).is_empty(), "{name}: {:?}", names(&sub));
        if *name == "online" {
            continue;
        }
        // The input itself, by its name or through a hard link: refused, input kept.
        let hard = d.join("hard.tansa");
        let _ = std::fs::remove_file(&hard);
        std::fs::hard_link(&rec, &hard).unwrap();
        for out in [&rec, &hard] {
            let o = run(out);
            assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
            assert!(
                stderr(&o).contains("writing the output there would replace it"),
                "{name}: {}",
                stderr(&o)
            );
            assert_eq!(std::fs::read(&rec).unwrap(), recording, "{name}");
        }
    }
    assert!(
        !names(d).iter().any(|n| n.ends_with(".tmp")),
        "{:?}",
        names(d)
    );
}

/// A name that is a stream rather than a file (a FIFO, `/dev/stdout`, `/dev/null`) is
/// written in place, for reports and recordings alike: replacing it, as a file is replaced,
/// would destroy a device node or a system link (as root, `-o /dev/null` turned
/// `/dev/null` into a regular file).
#[test]
fn a_stream_named_as_output_is_written_in_place_not_replaced() {
    let (dir, exe, rec) = recorded_allocer();
    let d = dir.path();
    let r = rec.to_str().unwrap();
    // Through the descriptor link /dev/stdout: the report arrives on standard output.
    let o = tansa_in(d, &["report", r, "-o", "/dev/stdout"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("tansa heap report"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        std::fs::symlink_metadata("/dev/stdout")
            .unwrap()
            .is_symlink()
    );
    // A FIFO: a report, then a whole recording, go through it; it stays a FIFO.
    let fifo = d.join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let read_all = |fifo: PathBuf| std::thread::spawn(move || std::fs::read(fifo).unwrap());
    let reader = read_all(fifo.clone());
    let o = tansa_in(
        d,
        &[
            "report",
            r,
            "--format",
            "json",
            "-o",
            fifo.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let got = reader.join().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&got).expect("the report, whole");
    assert_eq!(report["schema"], "tansa.memory-report.v1");
    let reader = read_all(fifo.clone());
    let o = tansa_in(
        d,
        &[
            "record",
            "-o",
            fifo.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let piped = d.join("piped.tansa");
    std::fs::write(&piped, reader.join().unwrap()).unwrap();
    let r = run_tansa(&["report", piped.to_str().unwrap(), "--by", "function"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(String::from_utf8_lossy(&r.stdout).contains("allocer!main"));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(names(d), ["in.tansa", "pipe", "piped.tansa"]);
}

/// `-o -` names standard output for reports. A recording is not written there, where the
/// command's own output goes: the recorders refuse it before running the command (they
/// wrote a file named `-`). The online report, a report, does go to standard output.
#[test]
fn a_recording_is_not_written_to_a_file_named_dash() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for cmd in [
        &["record", "-o", "-", "--", "sh", "-c", &touch][..],
        &["sample", "-o", "-", "--", "sh", "-c", &touch],
        &[
            "retrace", "record", "--region", "main", "-o", "-", "--", "sh", "-c", &touch,
        ],
    ] {
        let o = tansa_in(dir.path(), cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("-o -: a recording is not written to standard output"),
            "{cmd:?}: {}",
            stderr(&o)
        );
        assert!(!marker.exists(), "{cmd:?} ran the command");
        assert_eq!(names(dir.path()), Vec::<String>::new(), "{cmd:?}");
    }
    let o = tansa_in(
        dir.path(),
        &[
            "record", "--online", "--format", "json", "-o", "-", "--", "true",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["schema"], "tansa.memory-report.v1");
    assert_eq!(names(dir.path()), Vec::<String>::new());
}
