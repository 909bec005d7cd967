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
//! gone, resolves every address the recording uses ([`symbolize`]).

pub mod file;
pub mod session;
pub mod symbolize;
mod sys;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tansa_format::memory::{SessionEnd, SessionInfo};
use tansa_format::meta::{CalibrationPoint, ClockSource, ExitStatus};
use tansa_wire::control::{
    ENV_CLOCK, ENV_COLLECTOR_PID, ENV_FD, ENV_FREE_STACKS, ENV_MAX_FRAMES, ENV_ONLINE, ENV_RING_KB,
    ENV_SAMPLE_HZ, HELLO_SEGMENT, HELLO_SESSION, Hello,
};
use tansa_wire::layout::Geometry;

use crate::session::Session;
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
    /// Bytes of a session's meta stream (stack definitions, module loads).
    fn meta(&mut self, session: u32, bytes: &[u8]) -> Result<(), CollectError>;
    /// Bytes of a thread stream. A record may be split across calls.
    fn thread(&mut self, session: u32, stream: u32, bytes: &[u8]) -> Result<(), CollectError>;
    /// A thread stream is complete.
    fn stream_closed(&mut self, session: u32, stream: u32) -> Result<(), CollectError>;
    /// A session ended.
    fn session_ended(&mut self, end: &SessionEnd) -> Result<(), CollectError>;
    /// Every event with a timestamp below `ticks` has been delivered.
    fn watermark(&mut self, ticks: u64) -> Result<(), CollectError>;
    /// A clock calibration point, and a chance to do periodic work.
    fn tick(&mut self, point: CalibrationPoint) -> Result<(), CollectError>;
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
}

/// A ring found at least this full (in thousandths) is drained again without waiting.
const DRAIN_AT_ONCE_PERMILLE: u64 = 125;

fn clock_now(tsc: bool) -> u64 {
    if tsc {
        sys::rdtsc()
    } else {
        sys::monotonic_ns()
    }
}

fn decode_status(raw: i32) -> ExitStatus {
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

/// Signals the collector received (counted by handlers).
#[derive(Debug, Default)]
struct Signals {
    interrupt: Arc<AtomicUsize>,
    terminate: Arc<AtomicUsize>,
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
            // SAFETY: the handler only increments an atomic counter, which is
            // async-signal-safe.
            let _ = unsafe {
                signal_hook::low_level::register(sig, move || {
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
    sys::become_subreaper();
    let signals = Signals::install();

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
        .env(ENV_COLLECTOR_PID, std::process::id().to_string())
        .env(ENV_ONLINE, if config.online { "1" } else { "0" })
        .env(ENV_FREE_STACKS, if config.free_stacks { "1" } else { "0" })
        .env(ENV_CLOCK, if tsc { "tsc" } else { "monotonic" });
    if let Some(kb) = config.ring_kb {
        cmd.env(ENV_RING_KB, kb.to_string());
    }
    if let Some(n) = config.max_frames {
        cmd.env(ENV_MAX_FRAMES, n.to_string());
    }
    match config.sample_hz {
        Some(hz) => cmd.env(ENV_SAMPLE_HZ, hz.to_string()),
        None => cmd.env_remove(ENV_SAMPLE_HZ),
    };
    // The child gets default dispositions for the signals the collector handles.
    // SAFETY: the closure only calls async-signal-safe functions (signal).
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let start_point = CalibrationPoint {
        ticks: clock_now(tsc),
        ns: sys::monotonic_ns(),
    };
    sink.tick(start_point)?;
    let child = cmd.spawn().map_err(|source| CollectError::Spawn {
        command: program.to_string_lossy().into_owned(),
        source,
    })?;
    drop(theirs);
    let root = child.id();
    // We reap children ourselves (we are a subreaper), so the std handle is not waited on.
    drop(child);

    let mut sessions: Vec<Session> = Vec::new();
    let mut statuses: HashMap<u32, ExitStatus> = HashMap::new();
    let mut root_status: Option<ExitStatus> = None;
    let mut total_bytes = 0u64;
    let mut last_tick = Instant::now();
    let mut waiting_note_shown = false;
    let mut root_exited_at: Option<Instant> = None;
    let mut stop_waiting = false;
    let mut last_interrupts = 0;
    let mut fullest_permille = 0u64;

    loop {
        // Control messages: new sessions on the shared socket, new segments and hang-ups on
        // the private ones.
        let mut fds = vec![listener.as_raw_fd()];
        fds.extend(
            sessions
                .iter()
                .filter(|s| !s.ended)
                .map(|s| s.private.as_raw_fd()),
        );
        // Drain again at once only while some ring is filling up; otherwise wait a
        // millisecond (new sessions and hang-ups wake the poll early). Polling the rings
        // back to back would take a CPU from the target and pull the rings' head words
        // away from the threads writing them on every event.
        let timeout = if fullest_permille >= DRAIN_AT_ONCE_PERMILLE {
            0
        } else {
            1
        };
        let ready = sys::poll_readable(&fds, timeout);
        if ready[0] {
            while let sys::Received::Message(bytes, received) =
                sys::recv_with_fds(listener.as_raw_fd())?
            {
                handle_hello(&bytes, received, &mut sessions, sink, None)?;
            }
        }
        let live: Vec<usize> = (0..sessions.len())
            .filter(|&i| !sessions[i].ended)
            .collect();
        for (k, &i) in live.iter().enumerate() {
            if !ready.get(k + 1).copied().unwrap_or(false) {
                continue;
            }
            loop {
                match sys::recv_with_fds(sessions[i].private.as_raw_fd())? {
                    sys::Received::Message(bytes, received) => {
                        handle_hello(&bytes, received, &mut sessions, sink, Some(i))?;
                    }
                    sys::Received::WouldBlock => break,
                    sys::Received::Eof => {
                        sessions[i].ended = true;
                        break;
                    }
                }
            }
        }

        // Drain every ring; compute the online watermark.
        let now_ticks = clock_now(tsc);
        let mut watermark = now_ticks;
        let mut moved = 0;
        fullest_permille = 0;
        for s in sessions.iter_mut() {
            let d = s.drain(sink)?;
            moved += d.bytes;
            fullest_permille = fullest_permille.max(d.fullest_permille);
            if d.min_pending != 0 {
                watermark = watermark.min(d.min_pending);
            }
            s.heartbeat();
        }
        total_bytes += moved;
        sink.watermark(watermark)?;

        // Sessions whose process image is gone: drain what is left and close their streams.
        // (Their end records are written last, when every exit status is known.)
        for s in sessions.iter_mut() {
            if s.ended && !s.finalized {
                s.drain(sink)?;
                s.close_streams(sink)?;
                s.finalized = true;
            }
        }

        // Children (the root, and orphans we inherited as subreaper).
        while let Some((pid, raw)) = sys::reap_any() {
            let status = decode_status(raw);
            statuses.insert(pid, status);
            if pid == root {
                root_status = Some(status);
                root_exited_at = Some(Instant::now());
            }
        }

        if last_tick.elapsed() >= Duration::from_millis(100) {
            last_tick = Instant::now();
            sink.tick(CalibrationPoint {
                ticks: clock_now(tsc),
                ns: sys::monotonic_ns(),
            })?;
        }

        // Signals.
        let terminate = signals.terminate.swap(0, Ordering::SeqCst);
        if terminate > 0 && root_status.is_none() {
            sys::kill(root, libc::SIGTERM);
        }
        let interrupts = signals.interrupt.load(Ordering::SeqCst);
        if interrupts != last_interrupts {
            last_interrupts = interrupts;
            if root_status.is_some() {
                stop_waiting = true;
            }
        }

        let live_sessions = sessions.iter().filter(|s| !s.ended).count();
        if root_status.is_some() {
            if live_sessions == 0 || stop_waiting {
                break;
            }
            let grace_over = root_exited_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(1));
            if !waiting_note_shown && grace_over {
                waiting_note_shown = true;
                let pids: Vec<String> = sessions
                    .iter()
                    .filter(|s| !s.ended)
                    .map(|s| format!("{} ({})", s.pid, s.info.exe))
                    .collect();
                eprintln!(
                    "tansa: the command exited; still recording {} process(es) it started: {} (Ctrl-C to stop)",
                    pids.len(),
                    pids.join(", ")
                );
            }
        }
    }

    // Final drain of everything, then session ends with the best status we know.
    for s in sessions.iter_mut() {
        total_bytes += s.drain(sink)?.bytes;
        s.close_streams(sink)?;
    }
    sink.watermark(u64::MAX)?;
    let end_ticks = clock_now(tsc);
    for (i, s) in sessions.iter().enumerate() {
        let exec_later = sessions[i + 1..].iter().any(|t| t.pid == s.pid);
        let exit = if exec_later {
            ExitStatus::Exec
        } else if !s.ended {
            ExitStatus::Running
        } else if let Some(st) = statuses.get(&s.pid) {
            *st
        } else {
            ExitStatus::Unknown {
                normal_exit: s.exited_normally(),
            }
        };
        sink.session_ended(&SessionEnd {
            session: s.id,
            exit,
            lost_events: s.lost_events(),
            end_ticks,
        })?;
    }
    sink.tick(CalibrationPoint {
        ticks: clock_now(tsc),
        ns: sys::monotonic_ns(),
    })?;
    Ok(Outcome {
        exit: root_status.unwrap_or(ExitStatus::Running),
        clock: if tsc {
            ClockSource::Tsc
        } else {
            ClockSource::Monotonic
        },
        sessions: sessions.len() as u32,
        bytes: total_bytes,
        pid: root,
    })
}

fn handle_hello(
    bytes: &[u8],
    fds: Vec<OwnedFd>,
    sessions: &mut Vec<Session>,
    sink: &mut dyn Sink,
    from: Option<usize>,
) -> Result<(), CollectError> {
    let Some(hello) = Hello::from_bytes(bytes) else {
        return Err(CollectError::Protocol("malformed control message".into()));
    };
    if hello.version != tansa_wire::PROTOCOL_VERSION {
        return Err(CollectError::Protocol(format!(
            "agent speaks protocol {} but this collector speaks {} (mixed tansa versions?)",
            hello.version,
            tansa_wire::PROTOCOL_VERSION
        )));
    }
    let geometry = Geometry {
        ring_count: hello.ring_count,
        ring_data_size: hello.ring_data_size,
    };
    let mut fds = fds.into_iter();
    match (hello.kind, from) {
        (HELLO_SESSION, None) => {
            let (Some(memfd), Some(private)) = (fds.next(), fds.next()) else {
                return Err(CollectError::Protocol(
                    "session announcement without descriptors".into(),
                ));
            };
            let id = sessions.len() as u32;
            let s = Session::open(id, memfd, private, geometry)?;
            sink.session_started(&s.info)?;
            sessions.push(s);
        }
        (HELLO_SEGMENT, Some(i)) => {
            let Some(memfd) = fds.next() else {
                return Err(CollectError::Protocol(
                    "segment announcement without descriptor".into(),
                ));
            };
            sessions[i].add_segment(hello.segment_index, memfd, geometry)?;
        }
        _ => return Err(CollectError::Protocol("unexpected control message".into())),
    }
    Ok(())
}
