//! tansa's ptrace edge: everything that runs a program under ptrace.
//!
//! * [`record`]: the retrace recorder (the I/O edge of `tansa retrace`; the reconstruction
//!   itself is the sans-I/O `tansa-retrace`), below;
//! * [`follow`]: the path follower (single-steps one thread, classifying function entries,
//!   exits and conditional branches), and [`procmap`], the traced process's code map;
//! * [`leaks`]: the live side of leak-cause mode (seed 001), which drives the follower from
//!   the collector's events.
//!
//! [`record`] runs a command under ptrace, every thread of it, cuts its execution at every
//! entry into the region's function (a hardware breakpoint in each thread; the private
//! `session` module), samples each execution with one of three sources, in whichever thread
//! runs it, and optionally single-steps executions to capture the true trace:
//!
//! * `ptrace`: exact every-`P`-th-instruction sampling by single-stepping the region only
//!   (works everywhere, slow);
//! * `instructions`: the hardware retired-instruction counter with a fixed period, where
//!   the CPU has a PMU;
//! * `cpu-clock`: time-based samples, for the execution-time-weighted trace.
//!
//! Addresses are normalized to `(module, file address)` while the process lives, and the
//! code and source lines of every touched function are collected, so the recording can be
//! rebuilt and reported without the binary (see `tansa-format`'s `retrace` module). The
//! ptrace calls are in the private `sys` module; process control is `tansa_proc::os`;
//! `tansa-perf` wraps `perf_event_open`.

mod code;
pub mod follow;
pub mod leaks;
mod maps;
mod phase;
pub mod procmap;
mod record;
mod region;
mod session;
mod sys;
mod tracee;

pub use record::{
    Options, Recorded, SourceChoice, UNKNOWN_MODULE, default_period, record, stopped_by_recorder,
};
pub use region::{RegionTarget, close_matches, find_region, resolve_program};

use tansa_format::meta::ExitStatus;

/// Errors of the recorder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The program was not found (or is not a file).
    #[error("command not found: `{0}`")]
    CommandNotFound(String),
    /// The executable could not be read.
    #[error(transparent)]
    Symbols(#[from] tansa_symbols::SymbolError),
    /// No function of that name in the executable.
    #[error(
        "no function `{name}` in the main executable {exe}{}",
        suggest(.suggestions)
    )]
    UnknownRegion {
        /// The name asked for.
        name: String,
        /// The executable searched.
        exe: String,
        /// Close matches.
        suggestions: Vec<String>,
    },
    /// The name is not a function of the executable but one it imports from a shared
    /// library.
    #[error(
        "`{name}` is in a shared library that {exe} loads: regions are looked up in the \
         main executable only (the functions a region calls may be anywhere, so give a \
         function of the executable that calls it)"
    )]
    RegionInLibrary {
        /// The name asked for.
        name: String,
        /// The executable searched.
        exe: String,
    },
    /// A short name that several functions of the executable answer to.
    #[error("`{name}` names several functions in {exe}; pick one: {}", .candidates.join(", "))]
    AmbiguousRegion {
        /// The name asked for.
        name: String,
        /// The executable searched.
        exe: String,
        /// The functions it names.
        candidates: Vec<String>,
    },
    /// The program could not be started.
    #[error("cannot start `{program}`: {error}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        error: std::io::Error,
    },
    /// The program ended before it could be traced.
    #[error("the target {} before it could be traced", ended(.0))]
    ExitedAtStart(ExitStatus),
    /// The region's code is not mapped in the process.
    #[error("the code of `{0}` is not mapped in the target process")]
    RegionNotMapped(String),
    /// The target ended without running the region.
    #[error("the target {} before `{region}` ran", ended(.exit))]
    RegionNeverRan {
        /// The region.
        region: String,
        /// How the target ended.
        exit: ExitStatus,
    },
    /// The region ran, but no execution was sampled to its end.
    #[error(
        "`{region}` was entered {entries} time(s) but no execution was sampled to its end \
         ({warmup} warm-up execution(s) are skipped; the target {})",
        ended(.exit)
    )]
    NoCompleteExecution {
        /// The region.
        region: String,
        /// Times the region was entered.
        entries: u64,
        /// Warm-up executions.
        warmup: u64,
        /// How the target ended.
        exit: ExitStatus,
    },
    /// A ptrace or wait call failed.
    #[error("{op} failed: {error}")]
    Ptrace {
        /// The call.
        op: &'static str,
        /// The cause.
        error: std::io::Error,
    },
    /// A perf event could not be used.
    #[error(transparent)]
    Perf(#[from] tansa_perf::PerfError),
}

/// How the target ended, to follow "the target": "exited with code 0", "was killed by
/// SIGSEGV".
pub fn ended(exit: &ExitStatus) -> String {
    match exit {
        ExitStatus::Signaled { .. } => format!("was {}", exit.describe()),
        _ => exit.describe(),
    }
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(" (close matches: {})", s.join(", "))
    }
}
