//! Recordings are created safely: private (mode 0600), through a temporary file moved into
//! place at the end (none left behind), a default name never follows a symbolic link nor
//! replaces a file (a number is added), and a recording whose command was killed is kept.

mod common;

use std::os::unix::fs::{MetadataExt, symlink};
use std::path::Path;
use std::process::Command;

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
