//! Whether the CPUs have time to spare while a recording runs.
//!
//! Compressing a recording's event chunks costs the collector about a third of what the
//! agent spends recording them (zstd runs at some 300 MB/s on this data, and a busy program
//! makes 100 MB of events a second or more). On a machine whose CPUs the program keeps
//! busy, that time is taken from the program; on one with an idle CPU it is free. The
//! writer thread therefore asks, before each event chunk, whether the CPUs were idle
//! lately: for at least [`IDLE_SHARE`] of one CPU over the last [`WINDOW`] (`/proc/stat`,
//! all CPUs together). If not, the chunk is stored uncompressed.
//!
//! The question is about the machine, not tansa: a program that leaves CPUs idle has its
//! events compressed, one that fills them (or shares the machine with others that do) has
//! them stored. Until the first window has passed the CPUs count as busy, so a short
//! recording is not slowed down for a smaller file.
//!
//! In a container held to a CPU quota (a cgroup's `cpu.max`, or `cpu.cfs_quota_us`), the
//! machine may idle while the container is throttled: the CPUs then also count as busy
//! unless the group used less than its quota by [`IDLE_SHARE`] of one CPU
//! ([`tansa_proc::cgroup::GroupCpu`]).

use std::time::{Duration, Instant};

use tansa_proc::cgroup::GroupCpu;
use tansa_proc::idle::IdleClock;

/// How long one answer holds: long enough to span many clock ticks (the unit of the idle
/// time, usually 10 ms), short enough to follow a program's phases.
pub const WINDOW: Duration = Duration::from_millis(100);

/// Share of one CPU's time that must have been idle for the CPUs to have time to spare.
pub const IDLE_SHARE: f64 = 0.25;

/// Whether the CPUs, idle for `idle` (all together) during `elapsed`, were busy.
pub fn busy(idle: Duration, elapsed: Duration) -> bool {
    idle.as_secs_f64() < IDLE_SHARE * elapsed.as_secs_f64()
}

/// Whether a group allowed `cpus` CPUs, which used `used` of CPU time during `elapsed`,
/// had no time to spare.
pub fn group_busy(cpus: f64, used: Duration, elapsed: Duration) -> bool {
    let headroom = cpus * elapsed.as_secs_f64() - used.as_secs_f64();
    headroom < IDLE_SHARE * elapsed.as_secs_f64()
}

/// Follows the idle time of the machine's CPUs, window by window.
#[derive(Debug)]
pub struct CpuContention {
    /// None where `/proc/stat` cannot be read: the CPUs then never count as busy.
    clock: Option<IdleClock>,
    /// When the current window started, and the idle time then.
    since: Option<(Instant, Duration)>,
    /// The quota of tansa's control group, if one applies, and its usage when the
    /// current window started.
    group: Option<(GroupCpu, Duration)>,
    /// Whether some window was busy because the group had used up its quota.
    quota_used_up: bool,
    busy: bool,
}

impl CpuContention {
    /// Starts the first window.
    pub fn start() -> Self {
        let clock = IdleClock::open().ok();
        let since = clock
            .as_ref()
            .and_then(IdleClock::idle)
            .map(|idle| (Instant::now(), idle));
        let group = GroupCpu::of_self().and_then(|g| g.usage().map(|u| (g, u)));
        CpuContention {
            busy: since.is_some(),
            clock,
            since,
            group,
            quota_used_up: false,
        }
    }

    /// Whether the CPUs were busy in the last whole window (see the module documentation).
    pub fn cpus_busy(&mut self) -> bool {
        let (Some(clock), Some((start, idle_then))) = (&self.clock, self.since) else {
            return false;
        };
        let now = Instant::now();
        let elapsed = now.duration_since(start);
        if elapsed < WINDOW {
            return self.busy;
        }
        match clock.idle() {
            Some(idle) => {
                self.busy = busy(idle.saturating_sub(idle_then), elapsed);
                self.since = Some((now, idle));
                if let Some((group, used_then)) = &mut self.group
                    && let Some(used) = group.usage()
                {
                    let limited =
                        group_busy(group.cpus(), used.saturating_sub(*used_then), elapsed);
                    self.quota_used_up |= limited;
                    self.busy |= limited;
                    *used_then = used;
                }
            }
            None => {
                self.busy = false;
                self.since = None;
            }
        }
        self.busy
    }
}

impl CpuContention {
    /// The CPU quota of tansa's control group (in CPUs) if some window was busy because the
    /// group had used it up.
    pub fn quota_used_up(&self) -> Option<f64> {
        self.group
            .as_ref()
            .filter(|_| self.quota_used_up)
            .map(|(g, _)| g.cpus())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_a_cpu_idle_is_time_to_spare() {
        let ms = Duration::from_millis;
        assert!(busy(ms(0), ms(100)));
        assert!(busy(ms(20), ms(100)));
        assert!(!busy(ms(30), ms(100)));
        assert!(!busy(ms(150), ms(100)));
        assert!(!busy(ms(0), Duration::ZERO));
    }

    #[test]
    fn a_group_within_a_quarter_cpu_of_its_quota_is_busy() {
        let ms = Duration::from_millis;
        // Half a CPU allowed: 50 ms per 100 ms.
        assert!(group_busy(0.5, ms(50), ms(100)));
        assert!(group_busy(0.5, ms(30), ms(100)));
        assert!(!group_busy(0.5, ms(20), ms(100)));
        assert!(!group_busy(2.0, ms(150), ms(100)));
    }

    #[test]
    fn cpus_that_all_spin_are_busy() {
        let spinning = tansa_testkit::BusyCpus::start();
        let mut watcher = CpuContention::start();
        assert!(watcher.clock.is_some(), "/proc/stat cannot be read");
        let mut answers = Vec::new();
        for _ in 0..3 {
            std::thread::sleep(WINDOW + Duration::from_millis(5));
            answers.push(watcher.cpus_busy());
        }
        drop(spinning);
        assert_eq!(answers, [true; 3], "twice as many spinning threads as CPUs");
    }
}
