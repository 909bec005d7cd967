//! `tansa record --online`'s live view, on a real pseudo-terminal: the screen is read with a
//! terminal emulator (`vt100`) while `livegrow` (which keeps one 4 KiB block of
//! `liblive.so` every 20 ms) runs; off a terminal nothing changes.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use rustix::termios::{LocalModes, tcgetattr};
use serde_json::Value;

const ROWS: NonZeroU16 = NonZeroU16::new(40).unwrap();
const COLS: NonZeroU16 = NonZeroU16::new(120).unwrap();

/// `tansa` running on the slave side of a pseudo-terminal of `ROWS` x `COLS`, its own
/// session leader with that terminal as its controlling terminal (as in a shell), and
/// everything it writes fed to a terminal emulator.
struct Pty {
    master: File,
    child: Child,
    screen: Arc<Mutex<vt100::Parser>>,
    reader: Option<JoinHandle<()>>,
}

impl Pty {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Pty {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        use std::os::unix::process::CommandExt;
        ensure_agent();
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        rustix::termios::tcsetwinsize(
            &master,
            rustix::termios::Winsize {
                ws_row: ROWS.get(),
                ws_col: COLS.get(),
                ws_xpixel: 0,
                ws_ypixel: 0,
            },
        )
        .unwrap();
        let slave: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap()
            .into();
        let mut cmd = Command::new(tansa());
        cmd.args(args)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        for (k, v) in env {
            cmd.env(k, v);
        }
        // SAFETY: between fork and exec the closure only makes two system calls (setsid,
        // and the TIOCSCTTY ioctl on the standard input set up above), which allocate
        // nothing and take no lock.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(std::io::stdin().as_fd())?;
                Ok(())
            });
        }
        let child = cmd.spawn().expect("run tansa");
        drop(cmd);
        let master = File::from(master);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 0)));
        let reader = std::thread::spawn({
            let mut master = master.try_clone().unwrap();
            let screen = Arc::clone(&screen);
            move || {
                let mut buf = [0u8; 8192];
                // Reading ends with EIO once every process holding the slave is gone.
                while let Ok(n @ 1..) = master.read(&mut buf) {
                    screen.lock().unwrap().process(&buf[..n]);
                }
            }
        });
        Pty {
            master,
            child,
            screen,
            reader: Some(reader),
        }
    }

    /// The screen's text, and whether it is the alternate screen (the view's).
    fn screen(&self) -> (String, bool) {
        let p = self.screen.lock().unwrap();
        (p.screen().contents(), p.screen().alternate_screen())
    }

    /// Waits until `pred` holds on the screen; panics with the screen after `limit`.
    fn wait_for(&self, what: &str, limit: Duration, pred: impl Fn(&str, bool) -> bool) -> String {
        let start = Instant::now();
        loop {
            let (text, alt) = self.screen();
            if pred(&text, alt) {
                return text;
            }
            assert!(
                start.elapsed() < limit,
                "waited {limit:?} for {what}; the screen:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }

    /// Waits for `tansa` to end (everything it wrote read), returning its status and the
    /// screen.
    fn wait(&mut self) -> (ExitStatus, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > RUN_DEADLINE {
                let _ = self.child.kill();
                panic!("tansa did not end; the screen:\n{}", self.screen().0);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (status, self.screen().0)
    }

    /// Whether the terminal is back in its ordinary (cooked) mode: canonical input, echo,
    /// signals from the keyboard (the master reads the pair's settings).
    fn cooked(&self) -> bool {
        let t = tcgetattr(&self.master).unwrap();
        t.local_modes
            .contains(LocalModes::ICANON | LocalModes::ECHO | LocalModes::ISIG)
    }
}

/// The row of `unit` in the view's table: its cells (net, max, allocated as `N unit`
/// pairs, then calls).
fn table_row(screen: &str, unit: &str) -> Option<String> {
    screen
        .lines()
        .find(|l| l.starts_with('│') && l.contains(unit))
        .map(|l| {
            l.trim_matches('│')
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
}

fn capture(name: &str, text: &str) {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    eprintln!("{} ({}):\n{text}", name, path.display());
}

#[test]
fn the_table_updates_while_the_program_runs_and_q_closes_only_the_view() {
    let exe = livegrow();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    // 400 blocks, 20 ms apart: about 8 s, 1600 KiB of liblive.so at the end.
    let mut pty = Pty::spawn(
        &[
            "record",
            "--online",
            "--",
            exe.to_str().unwrap(),
            "400",
            "20",
            done.to_str().unwrap(),
        ],
        &[],
    );
    let limit = Duration::from_secs(60);
    let first = pty.wait_for("liblive.so in the live table", limit, |s, alt| {
        alt && table_row(s, "liblive.so").is_some()
    });
    assert!(first.starts_with("tansa record --online"), "{first}");
    assert!(first.contains("by library"), "{first}");
    assert!(first.contains("lost 0"), "{first}");
    assert!(first.contains("heap over time"), "{first}");
    assert!(first.contains("q close view"), "{first}");
    let before = table_row(&first, "liblive.so").unwrap();
    let later = pty.wait_for("liblive.so's figures to change", limit, |s, alt| {
        alt && table_row(s, "liblive.so").is_some_and(|r| r != before)
    });
    assert!(
        !done.exists(),
        "the figures must change while the program runs"
    );
    capture("live-screen.txt", &later);
    // `u`: the same bytes per function.
    pty.send(b"u");
    let by_function = pty.wait_for("the function table", limit, |s, _| {
        s.contains("by function") && table_row(s, "liblive.so!live_grow").is_some()
    });
    assert!(!by_function.contains("by library"), "{by_function}");
    // `q`: the view closes, the program goes on to its end, the report follows.
    pty.send(b"q");
    let closed = pty.wait_for("the view to close", limit, |s, alt| {
        !alt && s.contains("live view closed")
    });
    assert!(
        !done.exists(),
        "the program still runs after the view closed:\n{closed}"
    );
    assert!(
        pty.cooked(),
        "the terminal is given back when the view closes"
    );
    let (status, end) = pty.wait();
    assert!(status.success(), "{status:?}\n{end}");
    assert_eq!(std::fs::read_to_string(&done).unwrap(), "done\n");
    assert!(
        end.contains("tansa heap report: by library"),
        "the report is printed at the end:\n{end}"
    );
    let row = end
        .lines()
        .find(|l| l.starts_with("liblive.so "))
        .unwrap_or_else(|| panic!("no liblive.so row:\n{end}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // 400 x 4096 bytes = 1600 KiB, kept; 400 mallocs.
    assert_eq!(&cells[..3], ["liblive.so", "1.6", "MiB"], "{end}");
    assert_eq!(cells[9], "400", "{end}");
}

#[test]
fn a_failing_view_gives_the_terminal_back_and_the_recording_goes_on() {
    let exe = livegrow();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let json = dir.path().join("report.json");
    let mut pty = Pty::spawn(
        &[
            "record",
            "--online",
            "--live",
            "always",
            "--format",
            "json",
            "-o",
            json.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "100",
            "20",
            done.to_str().unwrap(),
        ],
        &[("TANSA_TEST_LIVE_PANIC", "1")],
    );
    let (status, end) = pty.wait();
    assert!(status.success(), "{status:?}\n{end}");
    assert!(end.contains("the live view panics"), "{end}");
    assert!(pty.cooked(), "the terminal is given back after a panic");
    assert_eq!(std::fs::read_to_string(&done).unwrap(), "done\n");
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let lib = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["unit"] == "liblive.so")
        .unwrap_or_else(|| panic!("no liblive.so unit: {r}"));
    assert_eq!(lib["net_bytes"], 100 * 4096);
    assert_eq!(lib["calls"]["malloc"], 100);
}

#[test]
fn ctrl_c_in_the_view_interrupts_the_program_as_without_it() {
    let exe = livegrow();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let mut pty = Pty::spawn(
        &[
            "record",
            "--online",
            "--sort",
            "allocated",
            "--",
            exe.to_str().unwrap(),
            "100000",
            "20",
            done.to_str().unwrap(),
        ],
        &[],
    );
    let first = pty.wait_for("the live table", Duration::from_secs(60), |s, alt| {
        alt && table_row(s, "liblive.so").is_some()
    });
    // The view sorts as --sort asks.
    assert!(first.contains("sorted by allocated"), "{first}");
    pty.send(b"\x03");
    let (status, end) = pty.wait();
    // The terminal sent SIGINT to the foreground process group: the program died of it
    // and tansa exits as the program did (128 + 2), after the report.
    assert_eq!(status.code(), Some(130), "{end}");
    assert!(end.contains("killed by SIGINT"), "{end}");
    assert!(end.contains("tansa heap report"), "{end}");
    assert!(pty.cooked(), "the terminal is given back");
    assert!(!done.exists());
}

/// The parts of a table report that differ between two runs (pid, event count, duration).
fn normalized(stderr: &str) -> String {
    stderr
        .lines()
        .map(|l| match l.find("`: ") {
            Some(i) if l.starts_with("process ") => {
                format!("process N{}", &l[i..l.find(';').unwrap_or(l.len())])
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn off_a_terminal_the_output_is_the_report_alone() {
    let exe = livegrow();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let run = |live: &[&str]| {
        let mut args = vec!["record", "--online"];
        args.extend(live);
        args.extend([
            "--",
            exe.to_str().unwrap(),
            "20",
            "1",
            done.to_str().unwrap(),
        ]);
        let out = run_tansa(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty());
        String::from_utf8(out.stderr).unwrap()
    };
    let auto = run(&[]);
    assert!(
        !auto.contains('\x1b'),
        "no terminal control off a terminal:\n{auto}"
    );
    let lines: Vec<&str> = auto.lines().collect();
    assert_eq!(
        lines[0],
        "tansa heap report: by library (charge first, releases charged to owner)"
    );
    assert!(lines[1].starts_with("process ") && lines[1].contains("exited with code 0"));
    let row: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("liblive.so "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..3], ["liblive.so", "80.0", "KiB"], "{auto}");
    // The same as --live never.
    assert_eq!(normalized(&auto), normalized(&run(&["--live", "never"])));
    // `always` needs a terminal and says so.
    let out = run_tansa(&[
        "record",
        "--online",
        "--live",
        "always",
        "--",
        exe.to_str().unwrap(),
        "1",
        "1",
        done.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--live always needs standard error to be a terminal"),
        "{err}"
    );
}
