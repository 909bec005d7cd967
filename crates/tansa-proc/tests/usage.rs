//! `tansa-proc` against a real process: a small C program that grows on request.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use tansa_proc::{ProcKey, find_by_name, read_usage};

/// Compiles `tests/grower.c` (flags recorded in its header) into `dir`.
fn build_grower(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grower.c");
    let out = dir.join("tansa-grower");
    tansa_testkit::compile(&out, &[src], &["-O1", "-g"]);
    out
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
    let dir = tempfile::tempdir().unwrap();
    let exe = build_grower(dir.path());
    let mut g = Grower::start(&exe);
    let pid = g.child.id();
    // The first command brings the code of sscanf, mmap and memset into memory: warm up.
    g.ask("grow 1");

    let before = read_usage(pid).unwrap();
    g.ask("grow 8");
    let grown = read_usage(pid).unwrap();
    let rss = grown.rss_bytes - before.rss_bytes;
    let pss = grown.pss_bytes - before.pss_bytes;
    // 8 MiB of private pages, touched: both measures grow by exactly that, give or take the
    // page tables and the odd stack page.
    assert!(
        (8 << 20..(8 << 20) + (64 << 10)).contains(&rss),
        "rss grew {rss}"
    );
    // PSS also moves with sharing: another process (a concurrent test) mapping the same
    // library pages lowers this one's share of them, so allow a little either way.
    assert!(
        ((8 << 20) - (64 << 10)..(8 << 20) + (64 << 10)).contains(&pss),
        "pss grew {pss}"
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
