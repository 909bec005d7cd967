//! Starting commands, waiting for them with a time limit, and stopping them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use super::cleanup::Cleanup;
use crate::plan::CommandSpec;
use crate::report::RunOutcome;

/// How often a waiting loop looks again.
pub(super) const POLL: Duration = Duration::from_millis(5);

/// The [`Command`] for `spec`, run in `cwd`, in a process group of its own (so a time-out
/// or a stop reaches its children too).
pub(super) fn command(spec: &CommandSpec, cwd: &Path) -> Command {
    let mut cmd = match spec {
        CommandSpec::Shell(s) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(s);
            c
        }
        CommandSpec::Argv(a) => {
            let mut c = Command::new(&a[0]);
            c.args(&a[1..]);
            c
        }
    };
    cmd.current_dir(cwd).stdin(Stdio::null()).process_group(0);
    cmd
}

/// `spec` for people.
pub(super) fn display(spec: &CommandSpec) -> String {
    match spec {
        CommandSpec::Shell(s) => s.clone(),
        CommandSpec::Argv(a) => a.join(" "),
    }
}

/// Sends `signal` to the process group led by `child` (never to pid 0 or 1).
pub(super) fn signal_group(child: &Child, signal: Signal) {
    signal_group_of(child.id(), signal);
}

/// Sends `signal` to the process group led by `leader` (never to pid 0 or 1).
pub(super) fn signal_group_of(leader: u32, signal: Signal) {
    let Ok(raw) = i32::try_from(leader) else {
        return;
    };
    if raw <= 1 {
        return;
    }
    if let Some(pid) = Pid::from_raw(raw) {
        // It may have ended already: nothing to do then.
        let _ = kill_process_group(pid, signal);
    }
}

/// The instant `d` from now; `None` (no deadline) when that is beyond what the clock
/// can represent.
pub(super) fn deadline(d: Duration) -> Option<Instant> {
    Instant::now().checked_add(d)
}

/// Waits for `child` until `deadline` (for ever without one); `None` when it is still
/// running then.
pub(super) fn wait_until(child: &mut Child, deadline: Option<Instant>) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if deadline.is_some_and(|d| Instant::now() >= d) => return None,
            Ok(None) => std::thread::sleep(POLL),
            // The child is ours; waiting on it cannot fail but for a bug. Treat as ended.
            Err(_) => return Some(ExitStatus::from_raw(0)),
        }
    }
}

/// Asks `child` and its group to stop (SIGTERM), then kills them after `grace`.
pub(super) fn stop(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        signal_group(child, Signal::KILL);
        return Some(status);
    }
    signal_group(child, Signal::TERM);
    let status = wait_until(child, deadline(grace));
    signal_group(child, Signal::KILL);
    status.or_else(|| child.wait().ok())
}

/// Runs `cmd` to its end or until `timeout`, its standard error into `stderr_path`.
pub(super) fn run(
    mut cmd: Command,
    timeout: Duration,
    stderr_path: &Path,
    cleanup: &Cleanup,
) -> RunOutcome {
    let stderr = match File::create(stderr_path) {
        Ok(f) => f,
        Err(e) => {
            return RunOutcome::NotStarted {
                error: format!("cannot create {}: {e}", stderr_path.display()),
            };
        }
    };
    cmd.stdout(Stdio::null()).stderr(stderr);
    let mut child = match cleanup.spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            return RunOutcome::NotStarted {
                error: e.to_string(),
            };
        }
    };
    let outcome = match wait_until(&mut child, deadline(timeout)) {
        Some(status) if status.success() => RunOutcome::Completed,
        Some(status) => RunOutcome::Failed {
            exit_code: status.code(),
            signal: status.signal(),
            stderr_tail: tail(stderr_path, 2048),
        },
        None => RunOutcome::Hung {
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        },
    };
    // Whatever it left behind in its group goes too.
    signal_group(&child, Signal::KILL);
    let _ = child.wait();
    cleanup.forget(child.id());
    outcome
}

/// The last `max` bytes of a file, as text.
pub(super) fn tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// How a process ended, in words.
pub(super) fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}{}", signal_name(s)),
        (None, None) => "ended".into(),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        8 => " (SIGFPE)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_fails_and_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let err = dir.path().join("err");
        let c = Cleanup::default();
        let sh = |s: &str| command(&CommandSpec::Shell(s.into()), dir.path());
        assert_eq!(
            run(sh("true"), Duration::from_secs(10), &err, &c),
            RunOutcome::Completed
        );
        match run(
            sh("echo nope >&2; exit 3"),
            Duration::from_secs(10),
            &err,
            &c,
        ) {
            RunOutcome::Failed {
                exit_code: Some(3),
                stderr_tail,
                ..
            } => assert_eq!(stderr_tail, "nope\n"),
            other => panic!("{other:?}"),
        }
        // A child of the shell that holds on is killed with it.
        let o = run(
            sh("sleep 30 & sleep 30"),
            Duration::from_millis(200),
            &err,
            &c,
        );
        assert_eq!(o, RunOutcome::Hung { timeout_ms: 200 });
        let argv = CommandSpec::Argv(vec!["/nonexistent/tool".into()]);
        assert!(matches!(
            run(command(&argv, dir.path()), Duration::from_secs(1), &err, &c),
            RunOutcome::NotStarted { .. }
        ));
    }

    #[test]
    fn after_a_stop_nothing_starts_and_what_ran_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cleanup::default();
        let mut long = command(&CommandSpec::Shell("sleep 30".into()), dir.path());
        let mut child = c.spawn(&mut long).unwrap();
        c.stop_all();
        // Ended by the stop, long before its 30 s.
        let status = wait_until(&mut child, deadline(Duration::from_secs(5)));
        assert!(status.is_some_and(|s| !s.success()));
        let mut again = command(&CommandSpec::Shell("true".into()), dir.path());
        assert!(c.spawn(&mut again).is_err());
    }

    #[test]
    fn a_timeout_beyond_the_clock_waits_without_a_deadline() {
        assert!(deadline(Duration::MAX).is_none());
        assert!(deadline(Duration::from_secs(1)).is_some());
        let dir = tempfile::tempdir().unwrap();
        let err = dir.path().join("err");
        let c = Cleanup::default();
        let t = command(&CommandSpec::Shell("true".into()), dir.path());
        let o = run(t, Duration::MAX, &err, &c);
        assert_eq!(o, RunOutcome::Completed);
    }
}
