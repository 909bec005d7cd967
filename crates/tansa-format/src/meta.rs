//! Frames common to every kind of recording.

use serde::{Deserialize, Serialize};

/// Who recorded what. The first frame of every recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingMeta {
    /// Name and version of the recorder, e.g. `tansa 0.1.0`.
    pub tool: String,
    /// Wall-clock time the recording started, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Host name of the machine.
    pub hostname: String,
    /// The command that was run (empty when attaching to processes).
    pub command: Vec<String>,
    /// Recorder options as `name=value` pairs, for display.
    pub options: Vec<(String, String)>,
}

/// How a recording's timestamps map to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClockSource {
    /// Timestamps are `CLOCK_MONOTONIC` nanoseconds.
    Monotonic,
    /// Timestamps are TSC ticks; calibration points give nanoseconds.
    Tsc,
}

/// A pair of simultaneous readings of the timestamp source and `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrationPoint {
    /// Reading of the timestamp source.
    pub ticks: u64,
    /// `CLOCK_MONOTONIC` in nanoseconds.
    pub ns: u64,
}

/// Calibration of the timestamp source, written at the end of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calibration {
    /// The timestamp source.
    pub source: ClockSource,
    /// Readings taken during the recording, in time order (at least two for a TSC).
    pub points: Vec<CalibrationPoint>,
}

impl Calibration {
    /// The identity calibration of a `CLOCK_MONOTONIC` source.
    pub fn monotonic() -> Self {
        Calibration {
            source: ClockSource::Monotonic,
            points: Vec::new(),
        }
    }

    /// Converts a timestamp to `CLOCK_MONOTONIC` nanoseconds, interpolating between the two
    /// nearest calibration points (extrapolating from the outermost pair).
    pub fn to_ns(&self, ticks: u64) -> u64 {
        if self.source == ClockSource::Monotonic || self.points.len() < 2 {
            return match (self.source, self.points.first()) {
                (ClockSource::Tsc, Some(p)) => p.ns.saturating_add(ticks.saturating_sub(p.ticks)),
                _ => ticks,
            };
        }
        let i = self.points.partition_point(|p| p.ticks <= ticks);
        let (a, b) = match i {
            0 => (self.points[0], self.points[1]),
            n if n >= self.points.len() => (
                self.points[self.points.len() - 2],
                self.points[self.points.len() - 1],
            ),
            n => (self.points[n - 1], self.points[n]),
        };
        let dt = b.ticks.saturating_sub(a.ticks).max(1) as f64;
        let dn = b.ns as f64 - a.ns as f64;
        let x = ticks as f64 - a.ticks as f64;
        (a.ns as f64 + x * dn / dt).max(0.0) as u64
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatus {
    /// It called `exit` or returned from `main` with this code.
    Exited {
        /// Exit code.
        code: i32,
    },
    /// A signal killed it.
    Signaled {
        /// Signal number.
        signal: i32,
        /// Whether it dumped core.
        core_dumped: bool,
    },
    /// It replaced its image with `execve` (the new image is another session).
    Exec,
    /// Its status was collected by another process; `normal_exit` says whether it ran its
    /// exit handlers (an `exit` rather than a signal or `_exit`).
    Unknown {
        /// Whether the agent saw the exit handlers run.
        normal_exit: bool,
    },
    /// Still running when the recording stopped.
    Running,
    /// Still running when a signal to the recorder (`SIGTERM`, `SIGHUP`, passed on to the
    /// command) stopped the recording.
    Stopped {
        /// The signal.
        signal: i32,
    },
    /// Its end is not known: the recorder was killed before it (the recording was
    /// salvaged afterwards).
    RecorderKilled,
}

impl ExitStatus {
    /// The status of an ended process from the raw `wait` status of its parent (`waitpid`,
    /// `wait4`): exited with a code, or killed by a signal (a stopped process has not ended:
    /// `Unknown`).
    pub fn from_wait_status(raw: i32) -> ExitStatus {
        if libc::WIFEXITED(raw) {
            ExitStatus::Exited {
                code: libc::WEXITSTATUS(raw),
            }
        } else if libc::WIFSIGNALED(raw) {
            ExitStatus::Signaled {
                signal: libc::WTERMSIG(raw),
                core_dumped: libc::WCOREDUMP(raw),
            }
        } else {
            ExitStatus::Unknown { normal_exit: false }
        }
    }

    /// The raw `wait` status of an ended process ([`ExitStatus::from_wait_status`] undone);
    /// `None` for the statuses that are not an end (`Exec`, `Running`, ...).
    pub fn wait_status(&self) -> Option<i32> {
        match *self {
            ExitStatus::Exited { code } => Some((code & 0xff) << 8),
            ExitStatus::Signaled {
                signal,
                core_dumped,
            } => Some((signal & 0x7f) | if core_dumped { 0x80 } else { 0 }),
            _ => None,
        }
    }

    /// A short human description, e.g. `exited with code 0` or `killed by SIGKILL`.
    pub fn describe(&self) -> String {
        match *self {
            ExitStatus::Exited { code } => format!("exited with code {code}"),
            ExitStatus::Signaled {
                signal,
                core_dumped,
            } => format!(
                "killed by {}{}",
                signal_name(signal),
                if core_dumped { " (core dumped)" } else { "" }
            ),
            ExitStatus::Exec => "replaced itself with execve".to_string(),
            ExitStatus::Unknown { normal_exit: true } => "exited normally".to_string(),
            ExitStatus::Unknown { normal_exit: false } => "ended without the agent seeing how: \
                 killed by a signal, or replaced by a program that ran unrecorded (its parent \
                 collected the status)"
                .to_string(),
            ExitStatus::Running => "still running when recording stopped".to_string(),
            ExitStatus::Stopped { signal } => format!(
                "still running when the recording was stopped by {}",
                signal_name(signal)
            ),
            ExitStatus::RecorderKilled => {
                "recording ended when the recorder was killed (how it ended is not known)"
                    .to_string()
            }
        }
    }
}

#[cfg(test)]
mod wait_status_tests {
    use super::ExitStatus;

    #[test]
    fn raw_wait_statuses() {
        // exit(3): 3 << 8; SIGKILL: 9; SIGSEGV with a core: 11 | 0x80; stopped by SIGSTOP.
        assert_eq!(
            ExitStatus::from_wait_status(3 << 8),
            ExitStatus::Exited { code: 3 }
        );
        assert_eq!(
            ExitStatus::from_wait_status(9),
            ExitStatus::Signaled {
                signal: 9,
                core_dumped: false
            }
        );
        assert_eq!(
            ExitStatus::from_wait_status(11 | 0x80),
            ExitStatus::Signaled {
                signal: 11,
                core_dumped: true
            }
        );
        assert_eq!(
            ExitStatus::from_wait_status((19 << 8) | 0x7f),
            ExitStatus::Unknown { normal_exit: false }
        );
    }

    #[test]
    fn an_end_goes_back_to_its_wait_status() {
        for raw in [0, 3 << 8, 255 << 8, 9, 15, 11 | 0x80, 6 | 0x80, 64] {
            let status = ExitStatus::from_wait_status(raw);
            assert_eq!(status.wait_status(), Some(raw), "{status:?}");
        }
        assert_eq!(ExitStatus::Exec.wait_status(), None);
        assert_eq!(ExitStatus::RecorderKilled.wait_status(), None);
        assert_eq!(
            ExitStatus::Unknown { normal_exit: true }.wait_status(),
            None
        );
    }
}

/// The conventional name of a Linux signal number (`SIG...`), or `signal N`.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|i| NAMES.get(i))
        .filter(|n| !n.is_empty())
        .map_or_else(|| format!("signal {signal}"), |n| (*n).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_calibration_interpolates_and_extrapolates() {
        let c = Calibration {
            source: ClockSource::Tsc,
            points: vec![
                CalibrationPoint {
                    ticks: 1000,
                    ns: 500,
                },
                CalibrationPoint {
                    ticks: 3000,
                    ns: 1500,
                },
                CalibrationPoint {
                    ticks: 5000,
                    ns: 2500,
                },
            ],
        };
        assert_eq!(c.to_ns(1000), 500);
        assert_eq!(c.to_ns(2000), 1000);
        assert_eq!(c.to_ns(4000), 2000);
        assert_eq!(c.to_ns(7000), 3500);
        assert_eq!(c.to_ns(0), 0);
        assert_eq!(Calibration::monotonic().to_ns(12345), 12345);
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!(signal_name(64), "signal 64");
        assert_eq!(
            ExitStatus::Signaled {
                signal: 6,
                core_dumped: true
            }
            .describe(),
            "killed by SIGABRT (core dumped)"
        );
    }
}
