//! Exit statuses and the messages that go with them (README, "Exit status").
//!
//! | status | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | error, nothing produced (a file that cannot be read, of the wrong kind, a command that cannot run); for `tansa diff --fail-if-growth`, a unit grew past the threshold (the comparison is produced) |
//! | 2 | command-line misuse (clap's usage errors, option values that do not apply) |
//! | 3 | damaged or truncated input: a partial report was produced, with warnings on standard error |
//!
//! `tansa record` and `tansa sample -- CMD` exit with the command's status; `tansa
//! leaktest` has its own statuses (see its `--help`). Libraries say what is wrong; this
//! module only adds the file name and what the user can do, and picks the status.

use std::fmt;
use std::path::Path;
use std::process::ExitCode;

use tansa_format::FormatError;

/// Success.
pub const SUCCESS: u8 = 0;
/// An error: nothing was produced.
pub const ERROR: u8 = 1;
/// `tansa diff --fail-if-growth`: a unit grew past the threshold.
pub const GROWTH: u8 = 1;
/// Command-line misuse.
pub const USAGE: u8 = 2;
/// Damaged or truncated input: a partial report was produced.
pub const DAMAGED: u8 = 3;

/// A misuse of the command line found after parsing (an option that does not apply to
/// the file given, say): exit status [`USAGE`].
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] with `message`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// The status `tansa record` and `tansa sample -- CMD` exit with: the command's own, 128 + N
/// when signal N killed it, 1 when how it ended is unknown.
pub fn of_command(status: tansa_format::meta::ExitStatus) -> ExitCode {
    use tansa_format::meta::ExitStatus;
    match status {
        ExitStatus::Exited { code } => ExitCode::from(code.clamp(0, 255) as u8),
        ExitStatus::Signaled { signal, .. } | ExitStatus::Stopped { signal } => {
            ExitCode::from((128 + signal).clamp(0, 255) as u8)
        }
        _ => ExitCode::from(ERROR),
    }
}

/// The exit status for an error that stopped a command.
pub fn status_of(err: &anyhow::Error) -> u8 {
    if err
        .chain()
        .any(|e| e.downcast_ref::<UsageError>().is_some())
    {
        USAGE
    } else {
        ERROR
    }
}

/// The error for a recording that cannot be read at all: the file, what is wrong, and
/// what to do.
pub fn unreadable(path: &Path, err: &FormatError) -> anyhow::Error {
    let advice = match err {
        FormatError::Io(_) | FormatError::Empty => "",
        FormatError::NotARecording => {
            "; give a file written by `tansa record`, `tansa sample` or `tansa retrace record`"
        }
        FormatError::UnsupportedVersion { .. } => "; read it with the tansa version that wrote it",
        FormatError::UnknownKind { .. } => {
            "; it was written by a newer tansa, or its header is damaged"
        }
        _ => "; nothing in it can be used: record again",
    };
    anyhow::anyhow!("{}: {err}{advice}", path.display())
}

/// The usage error for `--pid PID` naming a process that `path` does not hold: it lists
/// the process ids it has (sorted, at most 50).
pub fn no_such_process(
    pid: u32,
    path: &Path,
    pids: impl IntoIterator<Item = u32>,
) -> anyhow::Error {
    let mut pids: Vec<u32> = pids.into_iter().collect();
    pids.sort_unstable();
    pids.dedup();
    let list: Vec<String> = pids.iter().take(50).map(u32::to_string).collect();
    usage(format!(
        "process {pid} is not in {} (it has: {}{})",
        path.display(),
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        },
        if pids.len() > 50 { ", ..." } else { "" }
    ))
}

/// The error for a file that cannot be opened.
pub fn cannot_open(path: &Path, err: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!("{}: cannot open it: {err}", path.display())
}

/// Prints the warnings about `path` on standard error and returns the status of a
/// command that produced its output: [`DAMAGED`] when the input was damaged, else
/// [`SUCCESS`].
pub fn finish(path: &Path, damaged: bool, warnings: &[String]) -> ExitCode {
    print_warnings(path, warnings);
    ExitCode::from(if damaged { DAMAGED } else { SUCCESS })
}

/// [`finish`] for a command that read `paths` as one (a job's recordings): with several,
/// each warning already names its recording, so none is prefixed with the first one's.
pub fn finish_all(paths: &[std::path::PathBuf], damaged: bool, warnings: &[String]) -> ExitCode {
    match paths {
        [one] => finish(one, damaged, warnings),
        _ => {
            for w in warnings {
                eprintln!("tansa: warning: {w}");
            }
            ExitCode::from(if damaged { DAMAGED } else { SUCCESS })
        }
    }
}

/// Prints the warnings about `path` on standard error.
pub fn print_warnings(path: &Path, warnings: &[String]) {
    for w in warnings {
        eprintln!("tansa: warning: {}: {w}", path.display());
    }
}
