//! tansa's `/proc` edge: what a process uses, and who it is.
//!
//! Everything here reads files under `/proc`; the parsers are pure functions over the text of
//! those files so they can be tested on their own ([`stat::parse_stat`],
//! [`usage::parse_smaps_rollup`]).
//!
//! * [`usage::read_usage`]: resident set size and proportional set size (both from
//!   `/proc/<pid>/smaps_rollup`) and the number of open file descriptors (`/proc/<pid>/fd`).
//! * [`ProcKey`]: the identity of a process, its pid **and** its start time (field 22 of
//!   `/proc/<pid>/stat`), so a process that restarts, or a pid that the kernel reuses, is
//!   never taken for the process seen before.
//! * [`find::find_by_name`]: the live processes with a given name.
//! * [`maps::parse_exec_maps`]: the executable mappings of a process, for the CPU samplers
//!   and the path follower (one parser for all of them).
//! * [`idle::IdleClock`]: the time the CPUs spent idle, to tell whether they have time to
//!   spare (the recorder compresses only then); [`cgroup::GroupCpu`]: the CPU quota of the
//!   calling process's control group and the time the group used, for the same question
//!   in a container.
//! * [`os`]: process control over rustix (shared mappings, poll, signals, pidfds, waiting),
//!   for the collector, the perf layer, the CPU sampler and the tracer.

pub mod cgroup;
pub mod find;
pub mod idle;
pub mod maps;
pub mod os;
pub mod stat;
pub mod usage;

use std::io;
use std::path::PathBuf;

pub use find::find_by_name;
pub use stat::{Stat, read_stat};
pub use usage::{Usage, read_usage};

/// The executable of process `pid` (`/proc/<pid>/exe`), if it can be read.
pub fn exe_of(pid: u32) -> Option<String> {
    std::fs::read_link(proc_path(pid, "exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Errors reading `/proc`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcError {
    /// The process does not exist (any more), or is a zombie whose memory is gone.
    #[error("process {pid} is gone")]
    Gone {
        /// The pid asked for.
        pid: u32,
    },
    /// Reading a file failed for another reason (permissions, most often).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file did not have the expected shape.
    #[error("cannot parse {}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: &'static str,
    },
}

impl ProcError {
    /// Maps an I/O error on a file of process `pid`: "no such file" and "no such process" mean
    /// the process is gone.
    pub(crate) fn from_io(pid: u32, path: PathBuf, source: io::Error) -> Self {
        let gone = source.kind() == io::ErrorKind::NotFound
            || source.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error());
        if gone {
            ProcError::Gone { pid }
        } else {
            ProcError::Io { path, source }
        }
    }
}

/// The identity of a process: its pid and its start time in clock ticks after boot.
///
/// Two keys are equal only for the same process: a restarted process, or a new process that
/// got a recycled pid, has another start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcKey {
    /// Process id.
    pub pid: u32,
    /// Start time, in clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    pub start_ticks: u64,
}

impl ProcKey {
    /// The identity of the live process `pid`.
    pub fn of(pid: u32) -> Result<ProcKey, ProcError> {
        let stat = read_stat(pid)?;
        if stat.state == 'Z' || stat.state == 'X' {
            return Err(ProcError::Gone { pid });
        }
        Ok(ProcKey {
            pid,
            start_ticks: stat.start_ticks,
        })
    }

    /// Whether this very process still runs (same pid, same start time, not a zombie).
    pub fn is_alive(&self) -> bool {
        ProcKey::of(self.pid).is_ok_and(|k| k == *self)
    }

    /// Start time in seconds after boot.
    pub fn start_seconds(&self) -> f64 {
        self.start_ticks as f64 / clock_ticks_per_second() as f64
    }

    /// Start time on the wall clock, in milliseconds since the Unix epoch (to a clock
    /// tick): now, less the time since boot, plus the start time after boot.
    pub fn start_unix_ms(&self) -> u64 {
        let boot = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let since_boot_ms = (boot.tv_sec.max(0) as u64)
            .saturating_mul(1000)
            .saturating_add(boot.tv_nsec.max(0) as u64 / 1_000_000);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let start_ms = self.start_ticks.saturating_mul(1000) / clock_ticks_per_second().max(1);
        now_ms
            .saturating_sub(since_boot_ms)
            .saturating_add(start_ms)
    }
}

/// The kernel's clock tick rate (`sysconf(_SC_CLK_TCK)`), the unit of [`ProcKey::start_ticks`].
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// `/proc/<pid>/<file>`.
pub(crate) fn proc_path(pid: u32, file: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{file}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_started_just_now_has_a_wall_clock_start_of_just_now() {
        let now_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        };
        let before = now_ms();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let key = ProcKey::of(child.id()).unwrap();
        let after = now_ms();
        let started = key.start_unix_ms();
        child.kill().unwrap();
        child.wait().unwrap();
        // To a clock tick (10 ms at 100 Hz), and the two clocks read a moment apart.
        assert!(
            started + 50 >= before && started <= after + 50,
            "started {started}, spawned between {before} and {after}"
        );
    }
}
