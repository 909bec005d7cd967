//! tansa's collector: runs a command under the heap agent and moves what the agent records
//! out of the process while it runs.
//!
//! ```text
//!  target process (and its forks/execs)             tansa record
//!  ┌──────────────────────────────┐   memfd rings   ┌──────────────────────────────┐
//!  │ libtansa_agent.so (preloaded)│ ──────────────▶ │ Collector ──▶ Sink            │
//!  │  hooks → records → rings     │   SOCK_SEQPACKET│  (file writer, or online      │
//!  └──────────────────────────────┘ ──hello, fds──▶ │   aggregator)                 │
//!                                                   └──────────────────────────────┘
//! ```
//!
//! The collector never parses events on the offline path: it copies ring bytes to a
//! [`Sink`]. The [`file::FileSink`] writes them into a recording and, when the target is
//! gone, resolves every address the recording uses ([`symbolize`]). The
//! [`online::OnlineSink`] decodes them instead and aggregates them as they arrive
//! ([`online::record_online`], `tansa record --online`).

mod collector;
pub mod contention;
pub mod file;
pub mod naming;
pub mod online;
pub mod own_allocator;
pub mod salvage;
pub mod session;
pub mod symbolize;
mod sys;

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tansa_format::memory::{
    SessionEnd, SessionInfo, SessionLosses, SessionPlace, Unrecorded, VolatileSegment,
};
use tansa_format::meta::{CalibrationPoint, ClockSource, ExitStatus};
use tansa_wire::control::{
    ENV_CLOCK, ENV_COLLECTOR_PID, ENV_ENDPOINT, ENV_FD, ENV_FD_ID, ENV_FREE_STACKS, ENV_LEAK_CAUSE,
    ENV_LEAK_CHECK, ENV_MAX_FRAMES, ENV_ONLINE, ENV_RING_KB, ENV_SAMPLE_HZ, ENV_SAMPLE_RATE,
    ENV_SEGMENT_DIR,
};

use crate::collector::Collector;
pub use crate::sys::tsc_is_reliable;

/// Errors of the collector.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// The command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The agent library is missing.
    #[error(
        "the agent library {0} does not exist (build it with `cargo build --workspace`, or set TANSA_AGENT)"
    )]
    AgentMissing(PathBuf),
    /// An agent spoke a protocol we do not understand.
    #[error("agent protocol error: {0}")]
    Protocol(String),
    /// An I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The sink failed.
    #[error("{0}")]
    Sink(String),
}

/// Where the collector delivers what it drains.
pub trait Sink {
    /// A session (process image) started.
    fn session_started(&mut self, info: &SessionInfo) -> Result<(), CollectError>;
    /// The session's place in a parallel job, given right after [`Sink::session_started`]
    /// when its launcher named a rank.
    fn session_place(&mut self, _place: &SessionPlace) -> Result<(), CollectError> {
        Ok(())
    }
    /// The session's process sends CPython's object allocator to `malloc` (its environment
    /// sets `PYTHONMALLOC`), given right after [`Sink::session_started`]: a Python
    /// interpreter there allocates every object where the agent records it.
    fn session_python_malloc(&mut self, _session: u32) {}
    /// In a durable recording, a session's shared segment is in memory, not in a file of
    /// the segment directory: a kill of the recorder would lose what its rings hold.
    fn volatile_segment(&mut self, _segment: &VolatileSegment) -> Result<(), CollectError> {
        Ok(())
    }
    /// Bytes of a session's meta stream (stack definitions, module loads).
    fn meta(&mut self, session: u32, bytes: &[u8]) -> Result<(), CollectError>;
    /// Bytes of a thread stream. A record may be split across calls.
    fn thread(&mut self, session: u32, stream: u32, bytes: &[u8]) -> Result<(), CollectError>;
    /// A thread stream is complete.
    fn stream_closed(&mut self, session: u32, stream: u32) -> Result<(), CollectError>;
    /// A session ended.
    fn session_ended(&mut self, end: &SessionEnd) -> Result<(), CollectError>;
    /// What a session's agent could not record (sent after `session_ended`, only when
    /// something was lost or recorded without a stack).
    fn session_losses(&mut self, losses: &SessionLosses) -> Result<(), CollectError>;
    /// CPU sampling in the agent: CPU time of a session's threads that no sample stands for
    /// (each thread's time after its last signalled period), and how many threads it is of
    /// (sent after `session_ended`, only when not 0).
    fn session_unsampled(
        &mut self,
        _session: u32,
        _cpu_ns: u64,
        _threads: u64,
    ) -> Result<(), CollectError> {
        Ok(())
    }
    /// A process of the tree ran without being recorded.
    fn unrecorded(&mut self, process: &Unrecorded) -> Result<(), CollectError>;
    /// How many bytes of a stream (`stream`: a thread stream of `session`, `None`: the
    /// session's meta stream) the sink has stored where they outlive the collector (written
    /// to the recording file with `write(2)`), of those delivered to it. `None`: count
    /// everything delivered as stored. A durable recording frees ring space only up to
    /// there, so that rings backed by files and the recording always hold everything.
    fn stored(&mut self, _session: u32, _stream: Option<u32>) -> Option<u64> {
        None
    }
    /// A stream's ring fills up with bytes delivered but not stored yet: store them soon if
    /// at least `at_least` of them wait.
    fn store_soon(
        &mut self,
        _session: u32,
        _stream: Option<u32>,
        _at_least: u64,
    ) -> Result<(), CollectError> {
        Ok(())
    }
    /// Every event with a timestamp below `ticks` has been delivered.
    fn watermark(&mut self, ticks: u64) -> Result<(), CollectError>;
    /// A clock calibration point, and a chance to do periodic work.
    fn tick(&mut self, point: CalibrationPoint) -> Result<(), CollectError>;
    /// Leak-cause mode: the shared header of a session whose agent runs in that mode,
    /// given once, right after [`Sink::session_started`]. The sink may keep it (it stays
    /// mapped as long as a clone lives) to ask the agent for traces and take its requests.
    fn session_header(&mut self, _session: u32, _pid: u32, _header: SharedHeader) {}
}

/// The header page(s) of a session's first segment, mapped on their own so that they
/// outlive the session in the collector.
#[derive(Debug, Clone)]
pub struct SharedHeader(std::sync::Arc<HeaderMap>);

/// The mapping behind a [`SharedHeader`].
#[derive(Debug)]
struct HeaderMap(tansa_proc::os::SharedMapping);

// SAFETY: the header is shared memory accessed only through its atomics (and plain fields
// written once by the agent before it announced the session), from any thread.
unsafe impl Sync for HeaderMap {}

impl SharedHeader {
    /// Maps the header of the segment `memfd`.
    pub(crate) fn map(memfd: &std::os::fd::OwnedFd) -> std::io::Result<SharedHeader> {
        let page = 4096;
        let len = std::mem::size_of::<tansa_wire::layout::SegmentHeader>().div_ceil(page) * page;
        tansa_proc::os::SharedMapping::map(memfd.as_fd(), len, true)
            .map(|m| SharedHeader(std::sync::Arc::new(HeaderMap(m))))
    }

    /// The header.
    pub fn get(&self) -> &tansa_wire::layout::SegmentHeader {
        // SAFETY: the mapping covers the header, which the collector validated (magic and
        // version) before handing it out; it is only accessed through atomics and plain
        // fields the agent wrote before announcing the session.
        unsafe { &*(self.0.0.base() as *const tansa_wire::layout::SegmentHeader) }
    }
}

/// How to run the target.
#[derive(Debug, Clone)]
pub struct Config {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Path of `libtansa_agent.so`.
    pub agent: PathBuf,
    /// Online mode: the agent refuses unknown pointers; the sink aggregates.
    pub online: bool,
    /// Record the stacks of `free` calls.
    pub free_stacks: bool,
    /// Ring size in KiB (a power of two), or `None` for the agent's default.
    pub ring_kb: Option<u32>,
    /// Frame limit, or `None` for the default.
    pub max_frames: Option<u32>,
    /// Force `CLOCK_MONOTONIC` timestamps even where the TSC is reliable.
    pub monotonic_clock: bool,
    /// Take CPU samples at this rate (per second of each thread's CPU time) instead of
    /// recording heap events (the agent's fallback for `tansa sample`).
    pub sample_hz: Option<u32>,
    /// Leak-cause mode (seed 001): the agent hands traced allocations to the sink (see
    /// [`Sink::session_header`]), and programs run with `LD_BIND_NOW=1` so that a traced
    /// path never goes through the dynamic linker's lazy binding.
    pub leak_cause: bool,
    /// Leak check at exit: the agent keeps the table of live blocks and, when a process
    /// calls `exit`, writes which of them the program can no longer reach.
    pub leak_check: bool,
    /// Sampled heap mode: record allocations sampled every this many bytes on average, and
    /// the releases of sampled blocks only (`None`: every allocation). Not with `online`.
    pub sample_rate: Option<u64>,
    /// Who hears of what happens during the recording that is worth telling people
    /// ([`CollectEvent`]); `None`: nobody (the collector itself never prints).
    pub events: Option<EventHandler>,
    /// Durable recording: the directory (private, created by the caller, see
    /// [`salvage::segment_dir`]) in which agents create their shared segments as files,
    /// and rings give back space only for bytes the sink has stored ([`Sink::stored`]).
    /// What agents handed over then survives a collector killed with `SIGKILL`
    /// ([`salvage`]). `None`: memfd segments.
    pub segment_dir: Option<PathBuf>,
}

/// What the collector has to tell while it records (the CLI prints these).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollectEvent {
    /// The command exited a second ago and processes it started still run under the agent:
    /// the recording goes on until they end (or the user interrupts it).
    StillRecording {
        /// Each such process: `pid (executable)`.
        processes: Vec<String>,
    },
}

impl std::fmt::Display for CollectEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CollectEvent::StillRecording { processes } => write!(
                f,
                "the command exited; still recording {} process(es) it started: {} (Ctrl-C to \
                 stop)",
                processes.len(),
                processes.join(", ")
            ),
        }
    }
}

/// A receiver of [`CollectEvent`]s.
#[derive(Clone)]
pub struct EventHandler(pub Arc<dyn Fn(&CollectEvent) + Send + Sync>);

impl std::fmt::Debug for EventHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventHandler")
    }
}

impl Config {
    fn tell(&self, event: &CollectEvent) {
        if let Some(h) = &self.events {
            (h.0)(event);
        }
    }
}

/// How the recording went.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How the command itself ended.
    pub exit: ExitStatus,
    /// The clock the timestamps use.
    pub clock: ClockSource,
    /// Number of sessions recorded.
    pub sessions: u32,
    /// Bytes drained from the agent.
    pub bytes: u64,
    /// Root process id.
    pub pid: u32,
    /// Processes of the tree that ran without being recorded.
    pub unrecorded: u32,
    /// Events the agents could not record (each report says why).
    pub lost_events: u64,
    /// The signal (`SIGTERM`, `SIGHUP`) that stopped the recording while processes still
    /// ran (they were given [`STOP_GRACE`] to end after it was passed on to the command).
    pub stopped_by: Option<i32>,
}

/// After `SIGTERM` or `SIGHUP` (passed on to the command), how long the recording waits for
/// the command and its processes to end before it finishes anyway: launchers such as
/// `mpiexec` follow `SIGTERM` with `SIGKILL` within a few seconds.
pub const STOP_GRACE: Duration = Duration::from_millis(300);

/// Now on the agent's clock: TSC ticks if `tsc`, else `CLOCK_MONOTONIC` nanoseconds.
pub fn clock_now(tsc: bool) -> u64 {
    if tsc {
        sys::rdtsc()
    } else {
        sys::monotonic_ns()
    }
}

/// Signals the collector received (counted by handlers).
#[derive(Debug, Default)]
struct Signals {
    interrupt: Arc<AtomicUsize>,
    terminate: Arc<AtomicUsize>,
    /// The last of SIGTERM and SIGHUP received.
    last_terminate: Arc<AtomicUsize>,
}

impl Signals {
    fn install() -> Signals {
        let s = Signals::default();
        for (sig, counter) in [
            (signal_hook::consts::SIGINT, &s.interrupt),
            (signal_hook::consts::SIGTERM, &s.terminate),
            (signal_hook::consts::SIGHUP, &s.terminate),
        ] {
            let c = Arc::clone(counter);
            let last = Arc::clone(&s.last_terminate);
            let terminating = sig != signal_hook::consts::SIGINT;
            // SAFETY: the handler only updates atomics, which is async-signal-safe.
            let _ = unsafe {
                signal_hook::low_level::register(sig, move || {
                    if terminating {
                        last.store(sig as usize, Ordering::SeqCst);
                    }
                    c.fetch_add(1, Ordering::SeqCst);
                })
            };
        }
        s
    }
}

/// Runs `config.command` under the agent, delivering everything to `sink`, until the
/// command and every process it started that runs the agent have ended.
pub fn record(config: &Config, sink: &mut dyn Sink) -> Result<Outcome, CollectError> {
    if !config.agent.is_file() {
        return Err(CollectError::AgentMissing(config.agent.clone()));
    }
    let tsc = !config.monotonic_clock && sys::tsc_is_reliable();
    let (listener, theirs) = sys::control_pair()?;
    // Without the endpoint (no abstract namespace?), agents still have the inherited pair.
    let (endpoint, endpoint_name) = match sys::listen_endpoint() {
        Ok((fd, name)) => (Some(fd), Some(name)),
        Err(_) => (None, None),
    };
    sys::become_subreaper();
    // A socket per live process (and a pidfd per process, for its end): as many files as
    // the hard limit allows, not the usual soft limit of 1024, which a program with a
    // thousand processes at once would exhaust. The command gets the limit it would have
    // had (`spawn`).
    let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    session::set_exit_fd_limit(tansa_proc::os::ensure_open_files(1 << 20));
    let signals = Signals::install();
    sink.tick(CalibrationPoint {
        ticks: clock_now(tsc),
        ns: sys::monotonic_ns(),
    })?;
    let root = spawn(config, tsc, theirs, endpoint_name.as_deref(), open_files)?;
    let mut run = Run {
        collector: Collector::new(listener, endpoint, root, tsc),
        config,
        signals,
        tsc,
        root,
        root_status: None,
        root_exited_at: None,
        last_tick: Instant::now(),
        waiting_note_shown: false,
        stop_waiting: false,
        last_interrupts: 0,
        terminated_at: None,
    };
    run.collector.durable = config.segment_dir.is_some();
    while !run.step(sink)? {}
    let stopped_by = run.stopped_by();
    run.collector.stopped_by = stopped_by;
    run.collector.finish(sink)?;
    Ok(Outcome {
        exit: run.root_status.unwrap_or(match stopped_by {
            Some(signal) => ExitStatus::Stopped { signal },
            None => ExitStatus::Running,
        }),
        clock: if tsc {
            ClockSource::Tsc
        } else {
            ClockSource::Monotonic
        },
        sessions: run.collector.sessions.len() as u32,
        bytes: run.collector.total_bytes,
        pid: root,
        unrecorded: run.collector.unrecorded.len() as u32,
        lost_events: run.collector.lost_events,
        stopped_by,
    })
}

/// Starts the command with the agent preloaded and the collector's endpoints in its
/// environment (`theirs`: the inherited end of the control pair). Returns its pid.
fn spawn(
    config: &Config,
    tsc: bool,
    theirs: std::os::fd::OwnedFd,
    endpoint_name: Option<&str>,
    open_files: rustix::process::Rlimit,
) -> Result<u32, CollectError> {
    let fd_id = sys::socket_identity(theirs.as_fd())?;
    let mut preload = OsString::from(&config.agent);
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(existing);
    }
    let (program, args) = config
        .command
        .split_first()
        .ok_or_else(|| CollectError::Protocol("empty command".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("LD_PRELOAD", preload)
        .env(ENV_FD, theirs.as_raw_fd().to_string())
        .env(ENV_FD_ID, format!("{}:{}", fd_id.0, fd_id.1))
        .env(ENV_COLLECTOR_PID, std::process::id().to_string())
        .env(ENV_ONLINE, if config.online { "1" } else { "0" })
        .env(ENV_FREE_STACKS, if config.free_stacks { "1" } else { "0" })
        .env(ENV_CLOCK, if tsc { "tsc" } else { "monotonic" });
    if config.leak_cause {
        cmd.env(ENV_LEAK_CAUSE, "1").env("LD_BIND_NOW", "1");
    } else {
        cmd.env_remove(ENV_LEAK_CAUSE);
    }
    if config.leak_check {
        cmd.env(ENV_LEAK_CHECK, "1");
    } else {
        cmd.env_remove(ENV_LEAK_CHECK);
    }
    if let Some(kb) = config.ring_kb {
        cmd.env(ENV_RING_KB, kb.to_string());
    }
    match config.sample_rate {
        Some(rate) if !config.online => cmd.env(ENV_SAMPLE_RATE, rate.to_string()),
        _ => cmd.env_remove(ENV_SAMPLE_RATE),
    };
    if let Some(n) = config.max_frames {
        cmd.env(ENV_MAX_FRAMES, n.to_string());
    }
    match endpoint_name {
        Some(name) => cmd.env(ENV_ENDPOINT, name),
        None => cmd.env_remove(ENV_ENDPOINT),
    };
    match config.sample_hz {
        Some(hz) => cmd.env(ENV_SAMPLE_HZ, hz.to_string()),
        None => cmd.env_remove(ENV_SAMPLE_HZ),
    };
    match &config.segment_dir {
        Some(dir) => cmd.env(ENV_SEGMENT_DIR, std::path::absolute(dir)?),
        None => cmd.env_remove(ENV_SEGMENT_DIR),
    };
    // The child gets default dispositions for the signals the collector handles, and the
    // open-file limit the collector had before it raised its own.
    let unlimited = |v: Option<u64>| v.unwrap_or(libc::RLIM_INFINITY);
    let limit = libc::rlimit {
        rlim_cur: unlimited(open_files.current),
        rlim_max: unlimited(open_files.maximum),
    };
    // SAFETY: the closure only calls async-signal-safe functions (signal, setrlimit).
    unsafe {
        cmd.pre_exec(move || {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|source| CollectError::Spawn {
        command: program.to_string_lossy().into_owned(),
        source,
    })?;
    // Our copy of their end closes here: a hang-up then means every agent is gone.
    drop(theirs);
    // We reap children ourselves (we are a subreaper), so the std handle is not waited on.
    Ok(child.id())
}

/// One recording in progress: the collector and what the loop around it tracks.
struct Run<'a> {
    collector: Collector,
    config: &'a Config,
    signals: Signals,
    tsc: bool,
    root: u32,
    root_status: Option<ExitStatus>,
    root_exited_at: Option<Instant>,
    last_tick: Instant,
    waiting_note_shown: bool,
    stop_waiting: bool,
    last_interrupts: usize,
    /// When `SIGTERM` or `SIGHUP` came (and which) while the command ran.
    terminated_at: Option<(Instant, i32)>,
}

impl Run<'_> {
    /// One turn: control messages, rings, the root's end, the clock, signals. Returns
    /// whether the recording is over.
    fn step(&mut self, sink: &mut dyn Sink) -> Result<bool, CollectError> {
        self.collector.poll_control(sink)?;
        let watermark = self.collector.drain(sink, clock_now(self.tsc))?;
        sink.watermark(watermark)?;
        if let Some(status) = self.collector.reap() {
            self.root_ended(status);
        }
        if self.last_tick.elapsed() >= Duration::from_millis(100) {
            self.periodic(sink)?;
        }
        self.signals();
        if let Some((at, _)) = self.terminated_at
            && at.elapsed() >= STOP_GRACE
        {
            // The launcher's SIGKILL may follow soon: finish the recording now.
            return Ok(true);
        }
        Ok(self.root_status.is_some() && self.done_waiting())
    }

    /// The signal that stopped the recording while processes still ran, if one did.
    fn stopped_by(&self) -> Option<i32> {
        let (_, signal) = self.terminated_at?;
        (self.root_status.is_none() || self.collector.live_sessions().next().is_some())
            .then_some(signal)
    }

    fn root_ended(&mut self, status: ExitStatus) {
        self.root_status = Some(status);
        self.root_exited_at = Some(Instant::now());
    }

    /// Every 100 ms: a calibration point, and a check that the root still exists.
    fn periodic(&mut self, sink: &mut dyn Sink) -> Result<(), CollectError> {
        self.last_tick = Instant::now();
        self.collector.settle_statuses();
        self.collector.retire_durable(sink)?;
        // The command was reaped by someone else (it cannot be by design, but a loop
        // waiting for a status that never comes would hang the recording).
        if self.root_status.is_none() && !Path::new(&format!("/proc/{}", self.root)).exists() {
            self.root_ended(ExitStatus::Unknown { normal_exit: false });
        }
        sink.tick(CalibrationPoint {
            ticks: clock_now(self.tsc),
            ns: sys::monotonic_ns(),
        })
    }

    /// SIGTERM/SIGHUP are passed on to the command (the one received), and the recording
    /// ends [`STOP_GRACE`]
    /// later whoever still runs; SIGINT once the command has ended stops waiting for the
    /// processes it left behind.
    fn signals(&mut self) {
        let terminate = self.signals.terminate.swap(0, Ordering::SeqCst);
        if terminate > 0 {
            if self.root_status.is_none() {
                // The signal received is the one passed on: a program may treat a hang-up
                // (reload, say) otherwise than a termination.
                let signal = match self.signals.last_terminate.load(Ordering::SeqCst) as i32 {
                    libc::SIGHUP => libc::SIGHUP,
                    _ => libc::SIGTERM,
                };
                let _ = tansa_proc::os::kill(self.root, signal);
            }
            if self.terminated_at.is_none() {
                let signal = self.signals.last_terminate.load(Ordering::SeqCst) as i32;
                self.terminated_at = Some((Instant::now(), signal));
            }
        }
        let interrupts = self.signals.interrupt.load(Ordering::SeqCst);
        if interrupts != self.last_interrupts {
            self.last_interrupts = interrupts;
            if self.root_status.is_some() {
                self.stop_waiting = true;
            }
        }
    }

    /// After the command ended: whether every process it left under the agent has ended
    /// too (or the user stopped waiting). Tells once, after a second, who is still running.
    fn done_waiting(&mut self) -> bool {
        if self.stop_waiting || self.collector.live_sessions().next().is_none() {
            return true;
        }
        let grace_over = self
            .root_exited_at
            .is_some_and(|t| t.elapsed() >= Duration::from_secs(1));
        if !self.waiting_note_shown && grace_over {
            self.waiting_note_shown = true;
            let processes = self
                .collector
                .live_sessions()
                .map(|s| format!("{} ({})", s.pid, s.info.exe))
                .collect();
            self.config
                .tell(&CollectEvent::StillRecording { processes });
        }
        false
    }
}
