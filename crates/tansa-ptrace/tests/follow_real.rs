//! The path follower on a real process: function entries and exits, library calls run at
//! full speed, and each conditional branch reported at the same address whether taken or
//! not.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use tansa_ptrace::follow::{AttachedThread, FollowEnd, FollowLimits, PathEvent};
use tansa_ptrace::procmap::{ProcessCode, is_runtime_library};
use tansa_symbols::ElfFile;

/// The executable's first mapping: branch addresses relative to it are the same in every
/// run (PIE).
fn exe_base(pid: u32, exe: &std::path::Path) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .filter(|l| l.ends_with(exe.to_str().unwrap()))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .min()
        .unwrap()
}

/// Runs pathprog with `x`, follows `traced` to its return, and gives the events with
/// function names.
fn follow(x: u32) -> (Vec<String>, Vec<(u64, bool)>) {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build(dir.path(), "pathprog");
    // Bound at load time, as `tansa record --leak-cause` runs programs: a lazily bound first
    // call would run the dynamic linker's resolver instead of the function.
    let mut child = Command::new(&exe)
        .env("LD_BIND_NOW", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let tid: i32 = line.trim().parse().unwrap();
    let pid = child.id();
    let base = exe_base(pid, &exe);
    let mut code = ProcessCode::new(pid as i32, Box::new(|p| !is_runtime_library(p))).unwrap();
    let elf = ElfFile::open(&exe).unwrap();
    let traced = base + elf.function_by_name("traced").unwrap().address;
    let mut t = AttachedThread::attach(pid as i32, tid).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{x}\n").as_bytes())
        .unwrap();
    assert!(t.run_to(traced, None).unwrap(), "reached traced()");
    let mut events = Vec::new();
    let mut branches = Vec::new();
    let end = t
        .follow(
            &mut code,
            0,
            FollowLimits::default(),
            &mut || false,
            &mut |e| events.push(e),
        )
        .unwrap();
    assert_eq!(end, FollowEnd::RangeEnd);
    t.detach().unwrap();
    assert!(child.wait().unwrap().success());
    let mut names = Vec::new();
    let name = |entry: u64| code.function_at(entry).unwrap().name.clone();
    for e in events {
        match e {
            PathEvent::Enter { entry } => names.push(format!("{}-S", name(entry))),
            PathEvent::Exit { entry } => names.push(format!("{}-E", name(entry))),
            PathEvent::Branch { at, taken } => branches.push((at - base, taken)),
        }
    }
    (names, branches)
}

#[test]
fn function_entries_exits_and_branches_of_both_paths() {
    let (big, big_branches) = follow(9);
    assert_eq!(
        big,
        [
            "choose-S", "leaf-S", "leaf-E", "choose-E", "puts-S", "puts-E"
        ],
        "x = 9: choose calls leaf, then puts runs at full speed"
    );
    let (small, small_branches) = follow(1);
    assert_eq!(small, ["choose-S", "choose-E", "leaf-S", "leaf-E"]);
    // The same branch instructions on both paths, in opposite directions.
    let at = |b: &[(u64, bool)]| b.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(
        at(&big_branches),
        at(&small_branches),
        "{big_branches:?} {small_branches:?}"
    );
    assert!(!big_branches.is_empty());
    let directions: HashMap<u64, (bool, bool)> = big_branches
        .iter()
        .zip(&small_branches)
        .map(|(a, b)| (a.0, (a.1, b.1)))
        .collect();
    assert!(directions.values().all(|(a, b)| a != b), "{directions:?}");
}
