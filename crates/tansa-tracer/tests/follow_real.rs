//! The path follower on a real process: function entries and exits, library calls run at
//! full speed, and each conditional branch reported at the same address whether taken or
//! not.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use tansa_symbols::ElfFile;
use tansa_tracer::follow::{
    AttachedThread, CodeMap, FollowEnd, FollowLimits, FunctionInfo, PathEvent,
};

/// Functions of the executable (stepped); anything else is a library function entered at
/// the address called (not stepped).
struct ExeCode {
    lo: u64,
    hi: u64,
    /// (start, end, name), absolute, sorted.
    functions: Vec<(u64, u64, String)>,
}

impl ExeCode {
    fn new(pid: u32, exe: &std::path::Path) -> ExeCode {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let exe_s = exe.to_str().unwrap();
        let mut lo = u64::MAX;
        let mut hi = 0;
        let mut base = u64::MAX;
        for l in maps.lines().filter(|l| l.ends_with(exe_s)) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (a, b) = f[0].split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            let off = u64::from_str_radix(f[2], 16).unwrap();
            lo = lo.min(a);
            hi = hi.max(b);
            if off == 0 {
                base = base.min(a);
            }
        }
        let elf = ElfFile::open(exe).unwrap();
        let functions = elf
            .functions()
            .into_iter()
            .filter(|f| f.size > 0)
            .map(|f| (base + f.address, base + f.address + f.size, f.name))
            .collect();
        ExeCode { lo, hi, functions }
    }

    fn name(&self, entry: u64) -> String {
        self.functions
            .iter()
            .find(|f| f.0 == entry)
            .map_or_else(|| "lib".to_string(), |f| f.2.clone())
    }
}

impl CodeMap for ExeCode {
    fn function(&mut self, addr: u64) -> Option<FunctionInfo> {
        if addr < self.lo || addr >= self.hi {
            return Some(FunctionInfo {
                entry: addr,
                step: false,
            });
        }
        self.functions
            .iter()
            .find(|f| addr >= f.0 && addr < f.1)
            .map(|f| FunctionInfo {
                entry: f.0,
                step: true,
            })
    }
}

/// Runs pathprog with `x`, follows `traced` to its return, and gives the events with
/// function names.
fn follow(x: u32) -> (Vec<String>, Vec<(u64, bool)>) {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build(dir.path(), "pathprog");
    let mut child = Command::new(&exe)
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
    let code = ExeCode::new(pid, &exe);
    let traced = code.functions.iter().find(|f| f.2 == "traced").unwrap().0;
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
            &mut code.clone_map(),
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
    for e in events {
        match e {
            PathEvent::Enter { entry } => names.push(format!("{}-S", code.name(entry))),
            PathEvent::Exit { entry } => names.push(format!("{}-E", code.name(entry))),
            // Relative to the executable's first mapping: the same in every run (PIE).
            PathEvent::Branch { at, taken } => branches.push((at - code.lo, taken)),
        }
    }
    (names, branches)
}

impl ExeCode {
    fn clone_map(&self) -> ExeCode {
        ExeCode {
            lo: self.lo,
            hi: self.hi,
            functions: self.functions.clone(),
        }
    }
}

#[test]
fn function_entries_exits_and_branches_of_both_paths() {
    let (big, big_branches) = follow(9);
    assert_eq!(
        big,
        ["choose-S", "leaf-S", "leaf-E", "choose-E", "lib-S", "lib-E"],
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
