//! The `perf_event_open` recorder.
//!
//! One clock event per CPU (hardware cycles where the machine has a PMU, else the
//! `cpu-clock` software event) samples the interrupted address, the kernel call chain,
//! the frame-pointer user call chain and, for DWARF unwinding, the user registers and a
//! copy of the top of the user stack. The events also emit the side-band records that
//! track processes (comm, mmap2, fork, exit). For a command, the events follow it and its
//! children (`inherit`) from its `exec` (`enable_on_exec`); for `-p`, every thread of the
//! given processes; for `-a`, everything that runs, the kernel and the idle task included.
//!
//! The reader thread drains the rings in rounds: it snapshots every ring's head, then
//! handles the records of all rings up to those heads in time order (side-band records
//! applied, samples reduced), so a sample sees exactly the mappings and names that
//! preceded it on any CPU. Samples are
//! read in place from the ring and reduced by the builder without allocating when their
//! addresses and chain were seen before.

mod open;
mod spawn;
mod track;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tansa_format::cpu::{CpuInfo, CpuSummary, SampleSource};
use tansa_format::meta::{ExitStatus, RecordingMeta};
use tansa_perf::{RecordKind, SampleRef, SideBand};

pub use open::{online_cpus, paranoid};

use crate::SampleError;
use crate::builder::CpuRecordingBuilder;
use crate::checkpoint::RecordingOut;
use crate::kernel::KernelSymbols;
use crate::phases::Phases;
use crate::procfs;
use crate::warm::Warmer;
use open::Who;
use spawn::GatedChild;
use track::Tracker;

/// What to sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Run this command and sample it and its children.
    Command(Vec<OsString>),
    /// Sample these running processes (all their threads, and their future children).
    Pids(Vec<u32>),
    /// Sample every process on every CPU, the kernel and the idle task included.
    System,
}

/// Which event drives sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventChoice {
    /// Hardware cycles if the machine has a PMU, else `cpu-clock`.
    Auto,
    /// The `cpu-clock` software event (an hrtimer; also samples the idle task).
    CpuClock,
    /// Hardware cycles (fails without a PMU).
    Cycles,
}

/// How user stacks are unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// DWARF CFI over a copy of the user stack (frame pointers where CFI is missing or
    /// the frame-pointer chain is longer and valid).
    Dwarf,
    /// Frame pointers only (the kernel walks them; cheaper, wrong for code built without
    /// them).
    FramePointers,
}

/// Recorder settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// What to sample.
    pub target: Target,
    /// Samples per second per CPU.
    pub frequency_hz: u64,
    /// Stop after this long (a command is also stopped when it ends).
    pub duration: Option<Duration>,
    /// Keep per-sample timestamps.
    pub timeline: bool,
    /// The event.
    pub event: EventChoice,
    /// Stack unwinding.
    pub call_graph: CallGraph,
    /// Bytes of user stack copied per sample (DWARF unwinding).
    pub stack_bytes: u32,
    /// Data pages of each CPU's ring.
    pub ring_pages: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target: Target::System,
            frequency_hz: 997,
            duration: None,
            timeline: false,
            event: EventChoice::Auto,
            call_graph: CallGraph::Dwarf,
            stack_bytes: 8192,
            ring_pages: 1024,
        }
    }
}

/// What a recording run gives back.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Totals.
    pub summary: CpuSummary,
    /// The command's exit status (command target).
    pub exit: Option<ExitStatus>,
    /// The event sampled.
    pub event: String,
    /// Fallbacks taken and parts not covered.
    pub notes: Vec<String>,
    /// The module files whose symbols could not be read, one line each.
    pub unresolved: Vec<String>,
    /// Samples whose unwinding stopped at the end of their stack copy.
    pub short_stack_copies: tansa_format::cpu::ShortStackCopies,
    /// How long each phase of the run took.
    pub phases: Phases,
}

/// Whether `perf_event_open` is refused outright here (for choosing another sampler).
pub fn is_permission_error(e: &SampleError) -> bool {
    matches!(e, SampleError::PermissionDenied { .. })
}

struct Session {
    opened: open::Opened,
    tracker: Tracker,
    builder: CpuRecordingBuilder,
    /// Each record of a round: `(time, ring, position)`, kept between rounds.
    order: Vec<(u64, u32, u64)>,
}

impl Session {
    /// One drain round over every ring: its records, side-band and samples, handled in
    /// time order across the rings.
    fn round(&mut self) {
        let heads: Vec<u64> = self.opened.cpus.iter().map(|c| c.ring.head()).collect();
        let layout = self.opened.layout;
        let (tracker, builder) = (&mut self.tracker, &mut self.builder);
        // Each ring is in time order, but a sample must see exactly the mappings and names
        // that preceded it on any CPU: a library unloaded and another loaded at its address
        // within the round must not name the samples taken before the swap (nor a thread
        // renamed on one CPU right after its process's exec on another be named in the
        // image before the exec). So every record's time and place is noted first, then
        // the records are handled in that order, read again in place.
        let order = &mut self.order;
        order.clear();
        for (ring, (c, &head)) in self.opened.cpus.iter_mut().zip(&heads).enumerate() {
            let mut last = 0;
            c.ring.visit_positions(head, |pos, r| {
                let time = if r.kind() == RecordKind::Sample {
                    SampleRef::parse(r.body, &layout).ok().map(|s| s.time)
                } else {
                    SideBand::parse(&r, layout.format, true).map(|(_, id)| id.time)
                };
                // A record without a time keeps its place in its ring.
                last = time.unwrap_or(last);
                order.push((last, ring as u32, pos));
            });
        }
        // Stable: records of one time keep their ring order.
        order.sort_by_key(|o| o.0);
        for &(time, ring, pos) in order.iter() {
            let (Some(c), Some(&head)) = (
                self.opened.cpus.get_mut(ring as usize),
                heads.get(ring as usize),
            ) else {
                continue;
            };
            c.ring.visit_at(pos, head, |r| {
                if r.kind() == RecordKind::Sample {
                    tracker.sample(builder, r.body, r.misc, &layout);
                } else if let Some((sb, _)) = SideBand::parse(&r, layout.format, true) {
                    tracker.side_band(builder, &sb, time);
                }
            });
        }
        for (c, &head) in self.opened.cpus.iter_mut().zip(&heads) {
            c.ring.advance(head);
        }
    }

    fn set_enabled(&self, on: bool) -> Result<(), SampleError> {
        for c in &self.opened.cpus {
            for e in &c.events {
                if on {
                    e.enable()?;
                } else {
                    e.disable()?;
                }
            }
        }
        Ok(())
    }
}

fn threads_of(pids: &[u32]) -> Result<Vec<u32>, SampleError> {
    let mut tids = Vec::new();
    for &pid in pids {
        let p = procfs::read_process(pid).ok_or(SampleError::NoSuchProcess(pid))?;
        tids.extend(p.threads.iter().map(|t| t.0));
    }
    Ok(tids)
}

/// Samples `config.target` until it ends, `config.duration` passes or `stop` is set,
/// writing the recording to `out` as it goes (checkpoints, see [`crate::checkpoint`]) and
/// finishing it at the end. `meta` describes the recording;
/// `progress(samples)` is called after every drain round.
pub fn record<W: Write>(
    config: &Config,
    meta: RecordingMeta,
    stop: &AtomicBool,
    out: W,
    progress: &mut dyn FnMut(u64),
) -> Result<Outcome, SampleError> {
    let mut phases = Phases::new();
    // `-p` names processes: a thread's id stands for its process, and each process is
    // sampled once (opening its threads twice counted every sample twice).
    let target = match &config.target {
        Target::Pids(pids) => {
            let mut unique = Vec::new();
            for p in pids.iter().map(|&p| open::process_of(p)) {
                if !unique.contains(&p) {
                    unique.push(p);
                }
            }
            Target::Pids(unique)
        }
        t => t.clone(),
    };
    let config = &Config {
        target,
        ..config.clone()
    };
    let mut child = match &config.target {
        Target::Command(cmd) => Some(GatedChild::spawn(cmd)?),
        _ => None,
    };
    phases.mark("spawn");
    let who = match (&config.target, &child) {
        (Target::System, _) => Who::System,
        (Target::Pids(pids), _) => Who::Threads(threads_of(pids)?),
        (Target::Command(_), Some(c)) => Who::Threads(vec![c.pid]),
        (Target::Command(_), None) => Who::System,
    };
    let opened = open::open(config, &who, child.is_some())?;
    phases.mark("open events and rings");
    let info = CpuInfo {
        source: SampleSource::Perf,
        event: opened.event.clone(),
        period_ns: opened.period_ns,
        frequency_hz: config.frequency_hz,
        target: match config.target {
            Target::Command(_) => "command",
            Target::Pids(_) => "pids",
            Target::System => "system",
        }
        .into(),
        unwinding: match config.call_graph {
            CallGraph::Dwarf => "dwarf+fp",
            CallGraph::FramePointers => "fp",
        }
        .into(),
        kernel: opened.kernel,
        cpus: opened.cpus.len() as u32,
        timeline: config.timeline,
        notes: opened.notes.clone(),
        recorder_pid: std::process::id(),
    };
    // The header and description now, checkpoints while sampling: a recorder killed
    // outright leaves what it had at its last checkpoint.
    let mut out = RecordingOut::new(out, &meta, true).map_err(SampleError::Write)?;
    let builder = CpuRecordingBuilder::new(meta, info);
    let mut session = Session {
        opened,
        tracker: Tracker::new(config.call_graph == CallGraph::Dwarf, config.stack_bytes),
        builder,
        order: Vec::new(),
    };
    let started = Instant::now();
    if child.is_none() {
        session.set_enabled(true)?;
    }
    // The seed's initialization step: processes alive before sampling started, read
    // after the events are on so that none falls in between.
    match &config.target {
        Target::System => {
            session.tracker.add_idle(&mut session.builder);
            for pid in procfs::all_pids() {
                if let Some(pp) = procfs::read_process(pid) {
                    session.tracker.add_from_proc(&mut session.builder, &pp);
                }
            }
        }
        Target::Pids(pids) => {
            for &pid in pids {
                if let Some(pp) = procfs::read_process(pid) {
                    session.tracker.add_from_proc(&mut session.builder, &pp);
                }
            }
        }
        Target::Command(_) => {}
    }
    phases.mark("start (scan)");
    if let Some(c) = &mut child {
        c.release()?;
    }
    phases.mark("release (exec)");
    // What finishing needs (the kernel's symbols, the files of the modules hit) is read
    // while the target runs: the kernel's symbols from the start when kernel code is
    // sampled, the modules' files as the samples hit them. Started once the command runs,
    // so that it does not delay its start.
    let mut warmer = Warmer::start(session.opened.kernel);
    session.builder.track_new_locations();
    // The command's end wakes the loop at once (its pidfd), not at the next timeout.
    let ended = child
        .as_ref()
        .and_then(|c| tansa_proc::os::pidfd_open(c.pid));
    let mut exit = None;
    loop {
        let mut fds: Vec<std::os::fd::BorrowedFd<'_>> = session
            .opened
            .cpus
            .iter()
            .map(|c| c.events[0].as_fd())
            .collect();
        fds.extend(ended.as_ref().map(AsFd::as_fd));
        tansa_proc::os::poll_readable(&fds, Some(Duration::from_millis(100))).map_err(|error| {
            SampleError::Io {
                what: "poll".into(),
                source: error,
            }
        })?;
        drop(fds);
        session.round();
        warmer.feed(&mut session.builder);
        out.checkpoint_if_due(&mut session.builder);
        progress(session.builder.samples());
        if let Some(c) = &child
            && let Some(status) = c.try_wait()
        {
            exit = Some(status);
            break;
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if config.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if let Target::Pids(pids) = &config.target
            && pids
                .iter()
                .all(|&p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            break;
        }
    }
    phases.mark("run");
    session.set_enabled(false)?;
    session.round();
    let wall = started.elapsed();
    phases.mark("last round");
    if let Some(c) = &child
        && exit.is_none()
    {
        // Stopped by duration or interruption: the command keeps running unobserved;
        // end it as `timeout` would.
        c.kill(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while exit.is_none() && Instant::now() < deadline {
            exit = c.try_wait();
            std::thread::sleep(Duration::from_millis(10));
        }
        if exit.is_none() {
            c.kill(libc::SIGKILL);
            while exit.is_none() {
                exit = c.try_wait();
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    if let (Some(c), Some(status)) = (&child, exit)
        && let Some(p) = session.tracker.last(c.pid)
    {
        let end = session
            .builder
            .process(p)
            .and_then(|x| x.end_ns)
            .unwrap_or(0);
        session.builder.end_process(p, end, Some(status));
    }
    session
        .builder
        .set_wall_ns(wall.as_nanos().min(u128::from(u64::MAX)) as u64);
    phases.mark("end command");
    warmer.feed(&mut session.builder);
    warmer.finish();
    phases.mark("stop work ahead");
    let hit = session.builder.kernel_hit();
    let kernel = match warmer.take_kernel(hit) {
        Some(k) => k,
        None if hit => KernelSymbols::read(),
        None => None,
    };
    if let Some(k) = kernel {
        session.builder.set_kernel_symbols(k);
    }
    session.builder.warm = Some(warmer);
    phases.mark("kernel symbols");
    let event = session.opened.event.clone();
    let notes = session.opened.notes.clone();
    let finished = session.builder.finish_timed(out, &mut phases)?;
    drop(session.opened);
    phases.mark("close events, unmap rings");
    drop(session.tracker);
    phases.mark("free unwinders");
    Ok(Outcome {
        summary: finished.summary,
        exit,
        event,
        notes,
        unresolved: finished.unresolved,
        short_stack_copies: finished.short_stack_copies,
        phases,
    })
}
