//! Opening the sampling events: one per CPU (and per thread for `-p`), with the fallbacks
//! from hardware cycles to `cpu-clock` and from kernel-and-user to user-only sampling.

use tansa_perf::{
    Event, EventAttr, EventKind, HardwareEvent, PerfError, Ring, SampleFormat, SampleLayout,
    SoftwareEvent, X86_UNWIND_REGS,
};

use super::{CallGraph, Config, EventChoice};
use crate::SampleError;

/// The events of one CPU and their shared ring.
#[derive(Debug)]
pub struct CpuEvents {
    /// The events; the first owns the ring, the others write into it.
    pub events: Vec<Event>,
    /// The ring.
    pub ring: Ring,
}

/// The opened events and what was chosen.
#[derive(Debug)]
pub struct Opened {
    /// Per-CPU events.
    pub cpus: Vec<CpuEvents>,
    /// The sample layout.
    pub layout: SampleLayout,
    /// The event's name.
    pub event: String,
    /// Nominal period in nanoseconds.
    pub period_ns: u64,
    /// Whether kernel code is sampled.
    pub kernel: bool,
    /// Fallbacks taken, for the recording's notes.
    pub notes: Vec<String>,
}

/// Who to open events for.
#[derive(Debug, Clone)]
pub enum Who {
    /// Every thread on every CPU.
    System,
    /// These threads (their future children and threads are inherited).
    Threads(Vec<u32>),
}

/// The online CPUs (from `/sys/devices/system/cpu/online`, e.g. `0-3,5`).
pub fn online_cpus() -> Vec<u32> {
    let parse = |s: &str| -> Option<Vec<u32>> {
        let mut v = Vec::new();
        for part in s.trim().split(',') {
            match part.split_once('-') {
                Some((a, b)) => v.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
                None => v.push(part.parse().ok()?),
            }
        }
        Some(v)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse(&s))
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        })
}

/// `kernel.perf_event_paranoid`, if readable.
pub fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn is_permission(e: &PerfError) -> bool {
    matches!(e, PerfError::Open { error, .. }
        if matches!(error.raw_os_error(), Some(libc::EACCES | libc::EPERM)))
}

fn paranoid_text() -> String {
    paranoid().map_or_else(|| "unknown".to_string(), |p| p.to_string())
}

fn attr(config: &Config, kind: EventKind, kernel: bool, inherit: bool, exec: bool) -> EventAttr {
    let mut format = SampleFormat::IP
        | SampleFormat::TID
        | SampleFormat::TIME
        | SampleFormat::CPU
        | SampleFormat::PERIOD
        | SampleFormat::CALLCHAIN;
    if config.call_graph == CallGraph::Dwarf {
        format = format | SampleFormat::REGS_USER | SampleFormat::STACK_USER;
    }
    let mut a = EventAttr::new(kind);
    a = match kind {
        EventKind::Software(_) => a.sample_period(1_000_000_000 / config.frequency_hz.max(1)),
        _ => a.sample_frequency(config.frequency_hz),
    };
    a = a
        .sample_format(format)
        .exclude_kernel(!kernel)
        .exclude_hv(true)
        .disabled(true)
        .enable_on_exec(exec)
        .inherit(inherit)
        .mmap2(true)
        .mmap_build_id(true)
        .comm(true)
        .task(true)
        .sample_id_all(true)
        .sample_max_stack(127)
        .wakeup_watermark((config.ring_pages * 4096 / 4) as u32);
    if config.call_graph == CallGraph::Dwarf {
        a = a
            .sample_regs_user(X86_UNWIND_REGS)
            .sample_stack_user(config.stack_bytes);
    }
    a
}

fn open_all(
    config: &Config,
    attr: &EventAttr,
    who: &Who,
    cpus: &[u32],
) -> Result<Vec<CpuEvents>, PerfError> {
    let mut out = Vec::new();
    for &cpu in cpus {
        let mut events = Vec::new();
        match who {
            Who::System => events.push(Event::open_on(attr, -1, cpu as i32)?),
            Who::Threads(tids) => {
                for &tid in tids {
                    match Event::open_on(attr, tid as i32, cpu as i32) {
                        Ok(e) => events.push(e),
                        // A thread that ended meanwhile.
                        Err(PerfError::Open { error, .. })
                            if error.raw_os_error() == Some(libc::ESRCH) && !events.is_empty() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        let ring = ring_within_limits(&events[0], config.ring_pages)?;
        for e in &events[1..] {
            e.set_output(&events[0])?;
        }
        out.push(CpuEvents { events, ring });
    }
    Ok(out)
}

/// Maps a ring of `pages` data pages, or of fewer when the locked-memory limit for perf
/// rings (`kernel.perf_event_mlock_kb` plus `RLIMIT_MEMLOCK`, for unprivileged users)
/// refuses it.
fn ring_within_limits(event: &Event, pages: usize) -> Result<Ring, PerfError> {
    let mut pages = pages.max(1);
    loop {
        match Ring::new(event, pages) {
            Err(PerfError::Io { error, .. })
                if error.raw_os_error() == Some(libc::EPERM) && pages > 8 =>
            {
                pages /= 2;
            }
            other => return other,
        }
    }
}

/// Opens the events for `who`, with the configured event (or the fallbacks) and
/// `enable_on_exec` when `exec` (a command not yet started).
pub fn open(config: &Config, who: &Who, exec: bool) -> Result<Opened, SampleError> {
    let cpus = online_cpus();
    // An event per thread per CPU: a process of a thousand threads needs more than the
    // usual soft limit of 1024 open files.
    let need = match who {
        Who::Threads(tids) => (tids.len() * cpus.len()) as u64 + 256,
        Who::System => cpus.len() as u64 + 256,
    };
    let limit = tansa_proc::os::ensure_open_files(need);
    let inherit = matches!(who, Who::Threads(_));
    let mut notes = Vec::new();
    let mut kind = match config.event {
        EventChoice::CpuClock => EventKind::Software(SoftwareEvent::CpuClock),
        EventChoice::Cycles | EventChoice::Auto => EventKind::Hardware(HardwareEvent::Cycles),
    };
    let mut kernel = true;
    loop {
        let mut a = attr(config, kind, kernel, inherit, exec);
        let mut result = open_all(config, &a, who, &cpus);
        if matches!(&result, Err(PerfError::Open { error, .. }) if error.raw_os_error() == Some(libc::EINVAL))
        {
            // Kernels before 5.12 reject build ids in MMAP2 records.
            a = a.mmap_build_id(false);
            result = open_all(config, &a, who, &cpus);
        }
        match result {
            Ok(cpus) => {
                return Ok(Opened {
                    cpus,
                    layout: SampleLayout {
                        format: a.format(),
                        regs_user: a.regs_user(),
                    },
                    event: kind.name(),
                    period_ns: 1_000_000_000 / config.frequency_hz.max(1),
                    kernel,
                    notes,
                });
            }
            Err(e) if e.is_unsupported() && config.event == EventChoice::Auto => {
                if kind == EventKind::Software(SoftwareEvent::CpuClock) {
                    return Err(e.into());
                }
                notes.push(
                    "no hardware PMU (cycles cannot be counted here): sampled the cpu-clock \
                     software event"
                        .into(),
                );
                kind = EventKind::Software(SoftwareEvent::CpuClock);
            }
            Err(PerfError::Open { error, .. }) if error.raw_os_error() == Some(libc::EMFILE) => {
                let threads = match who {
                    Who::Threads(tids) => tids.len(),
                    Who::System => 0,
                };
                return Err(SampleError::Io {
                    what: format!(
                        "sampling {threads} thread(s) on {} CPU(s) needs {need} open files (an \
                         event per thread per CPU), beyond the open-file limit of {} (raise \
                         the hard limit: `ulimit -Hn`)",
                        cpus.len(),
                        limit.map_or("unlimited".into(), |n| n.to_string())
                    ),
                    source: error,
                });
            }
            Err(e) if is_permission(&e) => match who {
                Who::System => {
                    return Err(SampleError::PermissionDenied {
                        what: "sampling every process (-a) is not permitted".into(),
                        reason: format!(
                            "it needs kernel.perf_event_paranoid ≤ 0 (it is {}; `sysctl \
                             kernel.perf_event_paranoid=0`) or the CAP_PERFMON capability \
                             (or CAP_SYS_ADMIN)",
                            paranoid_text()
                        ),
                    });
                }
                Who::Threads(_) if kernel => {
                    notes.push(format!(
                        "kernel code not sampled: kernel.perf_event_paranoid is {} (kernel \
                         samples need ≤ 1 or CAP_PERFMON)",
                        paranoid_text()
                    ));
                    kernel = false;
                }
                Who::Threads(tids) => {
                    if let Some((tid, uid)) = other_users_thread(tids) {
                        return Err(SampleError::PermissionDenied {
                            what: format!(
                                "process {} belongs to {} (uid {uid}), not to you",
                                process_of(tid),
                                user_name(uid)
                            ),
                            reason: "sampling another user's process needs root or the \
                                     CAP_PERFMON capability (or run tansa as that user)"
                                .into(),
                        });
                    }
                    let reason = match paranoid() {
                        // The sysctl allows it: something else refuses.
                        Some(level) if level <= 2 => format!(
                            "refused although kernel.perf_event_paranoid is {level}, which \
                             allows user-space sampling: a seccomp profile (as in containers) \
                             or a security module forbids perf_event_open"
                        ),
                        _ => format!(
                            "kernel.perf_event_paranoid is {} (user-space sampling needs ≤ 2; \
                             `sysctl kernel.perf_event_paranoid=2`) or grant CAP_PERFMON; in a \
                             container, the seccomp profile may forbid perf_event_open",
                            paranoid_text()
                        ),
                    };
                    return Err(SampleError::PermissionDenied {
                        what: "perf_event_open is not permitted".into(),
                        reason,
                    });
                }
            },
            Err(e) => return Err(e.into()),
        }
    }
}

/// The first of `tids` that another user owns (effective uid other than ours), when we are
/// not root: `(tid, its uid)`.
fn other_users_thread(tids: &[u32]) -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me == 0 {
        return None;
    }
    tids.iter().find_map(|&tid| {
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
        let uid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (uid != me).then_some((tid, uid))
    })
}

/// The process (thread group) of thread `tid`.
pub(crate) fn process_of(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}

/// `user NAME` for `uid` from /etc/passwd, or `user uid` when unknown.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| format!("user {name}"))
            })
        })
        .unwrap_or_else(|| format!("user {uid}"))
}
