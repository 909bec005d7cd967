//! `tansa-proc` against a real process: a small C program that grows on request.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use tansa_proc::{ProcKey, find_by_name, read_usage};

/// Compiles `tests/grower.c` (flags recorded in its header) into `dir`.
fn build_grower(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grower.c");
    let out = dir.join("tansa-grower");
    tansa_testkit::compile(&out, &[src], &["-O1", "-g"]);
    out
}

/// The tests of this file run one at a time: a grower that starts or ends while another test
/// measures changes how many processes share the C library's pages, and so the measured PSS.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Resident pages of `pid` that other processes map too (`Shared_Clean` + `Shared_Dirty` of
/// `smaps_rollup`), in bytes: how far its PSS can move when those processes come and go.
fn shared_bytes(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("Shared_Clean:") || l.starts_with("Shared_Dirty:"))
        .map(|l| {
            let kb: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
            kb << 10
        })
        .sum()
}

struct Grower {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Grower {
    fn start(exe: &Path) -> Grower {
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("grower starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Grower {
            child,
            stdin,
            stdout,
        }
    }

    fn ask(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ok\n", "answer to {cmd}");
    }
}

#[test]
fn rss_pss_and_fds_follow_what_the_process_does() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = build_grower(dir.path());
    let mut g = Grower::start(&exe);
    let pid = g.child.id();
    // The first command brings the code of sscanf, mmap and memset into memory: warm up.
    g.ask("grow 1");

    let before = read_usage(pid).unwrap();
    let shared_before = shared_bytes(pid);
    g.ask("grow 8");
    let grown = read_usage(pid).unwrap();
    let shared = shared_before.max(shared_bytes(pid));
    let rss = grown.rss_bytes - before.rss_bytes;
    let pss = grown.pss_bytes - before.pss_bytes;
    // 8 MiB of private pages, touched: both measures grow by exactly that, give or take the
    // page tables and the odd stack page.
    assert!(
        (8 << 20..(8 << 20) + (64 << 10)).contains(&rss),
        "rss grew {rss}"
    );
    // PSS also moves with sharing: any process on the machine that maps or unmaps the same
    // library pages in between changes this one's share of them (a CI run once saw +74 KiB).
    // That share can move by at most the shared pages' size, so allow that much either way.
    let slack = (64 << 10) + shared;
    assert!(
        ((8 << 20) - slack..(8 << 20) + slack).contains(&pss),
        "pss grew {pss}, shared pages {shared}"
    );
    assert!(
        slack < 4 << 20,
        "shared pages {shared} leave the check meaningless"
    );

    g.ask("open");
    g.ask("open");
    let opened = read_usage(pid).unwrap();
    assert_eq!(opened.fds, grown.fds + 2);

    g.child.kill().unwrap();
    g.child.wait().unwrap();
    assert!(read_usage(pid).is_err());
}

#[test]
fn identity_is_pid_and_start_time_and_ends_with_the_process() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = build_grower(dir.path());
    let mut g = Grower::start(&exe);
    let pid = g.child.id();

    let key = ProcKey::of(pid).unwrap();
    assert_eq!(key.pid, pid);
    assert!(key.is_alive());
    assert!(key.start_seconds() > 0.0);
    // Found by its command name (the executable's name, shorter than 15 bytes).
    let found = find_by_name("tansa-grower").unwrap();
    assert!(found.contains(&key), "{found:?} lacks {key:?}");

    // Another process started later has another identity.
    let mut g2 = Grower::start(&exe);
    let key2 = ProcKey::of(g2.child.id()).unwrap();
    assert_ne!(key, key2);

    g.child.kill().unwrap();
    g.child.wait().unwrap();
    assert!(!key.is_alive());
    assert!(!find_by_name("tansa-grower").unwrap().contains(&key));
    // A key with the right pid but another start time is not that process.
    let forged = ProcKey {
        pid: key2.pid,
        start_ticks: key2.start_ticks + 1,
    };
    assert!(!forged.is_alive());
    g2.child.kill().unwrap();
    g2.child.wait().unwrap();
}
